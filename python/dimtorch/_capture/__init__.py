"""Graph capture: registers every op's Python definition with the core (its fallbacks) and with
Dynamo (torch.compiler.substitute_in_graph), and Tensor as a pytree node (docs/compiling.md)."""

"""Python definitions of the ops whose fast paths are C++ functions of dimtorch._C, one module per family (see dimtorch._op_table)."""

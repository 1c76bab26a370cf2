"""dimtorch.rf: RETURNN frontend's module paths (returnn.frontend -> dimtorch.rf) over dimtorch."""

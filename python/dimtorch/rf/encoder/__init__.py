"""rf.encoder (RETURNN frontend's encoders): base, conformer, conformer_v2, e_branchformer, transformer."""

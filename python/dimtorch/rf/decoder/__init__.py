"""rf.decoder (RETURNN frontend's decoders): transformer."""

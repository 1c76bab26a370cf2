"""A small RETURNN-style setup for tests/rf/test_runner.py (and `python -m dimtorch.rf.runner`): a label tagger
(Embedding -> LSTM -> Linear) learning target = (input + 1) mod vocab per frame, on random padded batches.

Step code takes its dims from extern_data (as RETURNN code may, and as dimtorch.rf.runner's stand-in binding
needs when dimtorch.rf.tensor is not installed)."""
import torch

import dimtorch as dt
import dimtorch.rf as rf
from dimtorch.rf._dims import batch_dim

VOCAB = 7
time_dim = dt.Dim(None, name="time")
vocab_dim = dt.Dim(VOCAB, name="vocab")
hidden_dim = dt.Dim(16, name="hidden")

extern_data = {
    "data": {"dims": [batch_dim, time_dim], "dtype": "int64", "sparse_dim": vocab_dim},
    "classes": {"dims": [batch_dim, time_dim], "dtype": "int64", "sparse_dim": vocab_dim},
}


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.embed = rf.Embedding(vocab_dim, hidden_dim)
        self.lstm = rf.LSTM(hidden_dim, hidden_dim)
        self.out = rf.Linear(hidden_dim, vocab_dim)
        for p in self.parameters():
            p.weight_decay = 1e-5

    def __call__(self, x, *, spatial_dim):
        h, _ = self.lstm(self.embed(x), state=None, spatial_dim=spatial_dim)
        return self.out(h)


def get_model(*, epoch, step):
    torch.manual_seed(0)
    return Model()


def train_step(*, model, extern_data):
    data, classes = extern_data["data"], extern_data["classes"]
    time = data.dims[1]
    logits = model(data, spatial_dim=time)
    ce = dt.cross_entropy(estimated=logits, target=classes, axis=vocab_dim, estimated_type="logits")
    rf.get_run_ctx().mark_as_loss(ce, "ce")
    errors = dt.cast(dt.reduce_argmax(logits, axis=vocab_dim) != classes, "float32")
    rf.get_run_ctx().mark_as_loss(errors, "fer", as_error=True)


def forward_step(*, model, extern_data):
    data = extern_data["data"]
    logits = model(data, spatial_dim=data.dims[1])
    rf.get_run_ctx().mark_as_default_output(dt.reduce_argmax(logits, axis=vocab_dim))


def make_batch(g: torch.Generator, batch: int = 8):
    lengths = torch.randint(1, 9, (batch,), generator=g)
    data = torch.randint(0, VOCAB, (batch, int(lengths.max())), generator=g)
    return {"data": data, "data:seq_len": lengths, "classes": (data + 1) % VOCAB, "classes:seq_len": lengths}


def train_batches(*, epoch):
    g = torch.Generator().manual_seed(epoch)
    return [make_batch(g) for _ in range(30)]


def forward_batches():
    return [make_batch(torch.Generator().manual_seed(100), 3)]

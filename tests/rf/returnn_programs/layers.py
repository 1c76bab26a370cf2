"""Program (RETURNN user code): a forward step through rf's layers and array ops, parameters in RETURNN's
layouts (loaded by name from the RETURNN model).

Embedding of sparse labels, Conv1d with "same" padding, LayerNorm, BatchNorm (masked statistics: eval
mode uses the running ones), concat_features, split_dims/merge_dims, matmul with reduce=[] (an outer
product), gather by labels without axis= (the indices' sparse dim), cross entropy with int32 targets,
top_k, split (a tuple) and concat. Run by tests/rf/test_returnn_programs.py on RETURNN and, imports
edited, on dimtorch.rf.
"""
import returnn.frontend as rf
from returnn.tensor import Tensor, Dim, TensorDict, batch_dim

time_dim = Dim(Tensor("time", [batch_dim], dtype="int32"))
in_dim = Dim(6, name="in")
vocab_dim = Dim(7, name="vocab")
emb_dim = Dim(4, name="emb")
model_dim = Dim(8, name="model")
extern_data = TensorDict(
    {
        "data": Tensor("data", [batch_dim, time_dim, in_dim], dtype="float32"),
        "labels": Tensor("labels", [batch_dim, time_dim], dtype="int32", sparse_dim=vocab_dim),
    }
)


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.embed = rf.Embedding(vocab_dim, emb_dim)
        self.conv = rf.Conv1d(in_dim, model_dim, filter_size=3, padding="same")
        self.norm = rf.LayerNorm(model_dim)
        self.bn = rf.BatchNorm(model_dim, use_mask=True)
        self.out = rf.Linear(model_dim + emb_dim, vocab_dim)
        self.table = rf.Parameter([vocab_dim, model_dim])
        self.table.initial = rf.init.Glorot()


def get_model(*, epoch: int, step: int, **_kwargs):
    return Model()


def forward_step(*, model: Model, extern_data: TensorDict, **_kwargs):
    x, labels = extern_data["data"], extern_data["labels"]
    emb = model.embed(labels)
    conv, conv_time = model.conv(x, in_spatial_dim=time_dim)
    h = model.bn(model.norm(rf.relu(conv)))
    h.mark_as_output("h", shape=[batch_dim, conv_time, model_dim])
    both = rf.concat_features(h, emb)
    logits = model.out(both)
    logits.mark_as_output("logits", shape=[batch_dim, time_dim, vocab_dim])
    heads, head_dim = Dim(2, name="heads"), Dim(4, name="head")
    split = rf.split_dims(h, axis=model_dim, dims=[heads, head_dim])
    merged, merged_dim = rf.merge_dims(split, dims=[heads, head_dim])
    merged.mark_as_output("merged", shape=[batch_dim, time_dim, merged_dim])
    summary = rf.reduce_mean(h, axis=time_dim)
    outer = rf.matmul(summary, rf.reduce_mean(emb, axis=time_dim), reduce=[])
    outer.mark_as_output("outer", shape=[batch_dim, model_dim, emb_dim])
    rf.gather(model.table, indices=labels).mark_as_output("gathered", shape=[batch_dim, time_dim, model_dim])
    ce = rf.cross_entropy(estimated=logits, estimated_type="logits", target=labels, axis=vocab_dim)
    ce.mark_as_output("ce", shape=[batch_dim, time_dim])
    values, indices, k_dim = rf.top_k(logits, axis=vocab_dim, k=2)
    values.mark_as_output("top_values", shape=[batch_dim, time_dim, k_dim])
    indices.mark_as_output("top_indices", shape=[batch_dim, time_dim, k_dim])
    a_dim, b_dim = Dim(3, name="a"), Dim(5, name="b")
    parts = rf.split(h, axis=model_dim, out_dims=[a_dim, b_dim])
    assert isinstance(parts, tuple) and len(parts) == 2
    joined, joined_dim = rf.concat((parts[1], b_dim), (parts[0], a_dim))
    joined.mark_as_output("joined", shape=[batch_dim, time_dim, joined_dim])

"""Program (RETURNN user code): a train step that marks losses in each of RETURNN's ways.

A frame-wise cross entropy marked summed, normalised and scaled, a per-sequence sum with a custom
inverse norm factor (the sequence lengths), and a frame error rate as an error (not in the total loss).
Run by tests/rf/test_returnn_programs_train.py on RETURNN and, imports edited, on dimtorch.rf: every
loss's summed, mean and inv_norm_factor values, the total loss and the gradients must agree.
"""
import returnn.frontend as rf
from returnn.tensor import Tensor, Dim, TensorDict, batch_dim

time_dim = Dim(Tensor("time", [batch_dim], dtype="int32"))
in_dim = Dim(5, name="in")
vocab_dim = Dim(6, name="vocab")
extern_data = TensorDict(
    {
        "data": Tensor("data", [batch_dim, time_dim, in_dim], dtype="float32"),
        "classes": Tensor("classes", [batch_dim, time_dim], dtype="int32", sparse_dim=vocab_dim),
    }
)


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.out = rf.Linear(in_dim, vocab_dim)


def get_model(*, epoch: int, step: int, **_kwargs):
    return Model()


def train_step(*, model: Model, extern_data: TensorDict, **_kwargs):
    x, targets = extern_data["data"], extern_data["classes"]
    logits = model.out(x)
    ce = rf.cross_entropy(estimated=logits, estimated_type="logits", target=targets, axis=vocab_dim)
    ce.mark_as_loss("ce")
    ce.mark_as_loss("ce_norm", use_normalized_loss=True, scale=0.5)
    per_seq = rf.reduce_sum(ce, axis=time_dim)
    per_seq.mark_as_loss("ce_seq", custom_inv_norm_factor=time_dim.get_size_tensor(), scale=0.25)
    errors = rf.reduce_argmax(logits, axis=vocab_dim) != targets
    errors.mark_as_loss("fer", as_error=True)

"""Program (RETURNN user code): a forward step over dims declared once at module level and bound per batch.

A Linear, reductions and a softmax over the declared time dim, a cumulative sum, and dims made from it
(padding by one frame in front, a strided window) whose lengths follow each batch's lengths. Run by
tests/rf/test_returnn_programs.py on RETURNN and, imports edited, on dimtorch.rf.
"""
import returnn.frontend as rf
from returnn.tensor import Tensor, Dim, TensorDict, batch_dim

time_dim = Dim(Tensor("time", [batch_dim], dtype="int32"))
in_dim = Dim(5, name="in")
out_dim = Dim(4, name="out")
extern_data = TensorDict({"data": Tensor("data", [batch_dim, time_dim, in_dim], dtype="float32")})


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.linear = rf.Linear(in_dim, out_dim)

    def __call__(self, x: Tensor) -> Tensor:
        return self.linear(x)


def get_model(*, epoch: int, step: int, **_kwargs):
    return Model()


def forward_step(*, model: Model, extern_data: TensorDict, **_kwargs):
    x = extern_data["data"]
    y = model(x)
    rf.reduce_mean(y, axis=time_dim).mark_as_output("mean", shape=[batch_dim, out_dim])
    rf.reduce_max(y, axis=time_dim).mark_as_output("max", shape=[batch_dim, out_dim])
    rf.reduce_sum(y, axis=[time_dim, out_dim]).mark_as_output("sum", shape=[batch_dim])
    rf.softmax(y, axis=time_dim).mark_as_output("softmax", shape=[batch_dim, time_dim, out_dim])
    rf.cumsum(y, spatial_dim=time_dim).mark_as_output("cumsum", shape=[batch_dim, time_dim, out_dim])
    padded, (padded_time,) = rf.pad(y, axes=[time_dim], padding=[(1, 0)], value=0.5)
    padded.mark_as_output("padded", shape=[batch_dim, padded_time, out_dim])
    lengths = rf.cast(time_dim.get_size_tensor(), "float32")
    (rf.reduce_sum(y, axis=time_dim) / lengths).mark_as_output("mean_by_lengths", shape=[batch_dim, out_dim])
    window_dim = Dim(2, name="window")
    win, win_time = rf.window(y, spatial_dim=time_dim, window_dim=window_dim, stride=2, pad_value=0.0)
    rf.reduce_sum(win, axis=window_dim).mark_as_output("window_sum", shape=[batch_dim, win_time, out_dim])
    mask = rf.sequence_mask([batch_dim, time_dim])
    rf.where(mask, y, 0.0).mark_as_output("masked", shape=[batch_dim, time_dim, out_dim])

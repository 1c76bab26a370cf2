"""Program (RETURNN user code): an eager beam search in the style of RETURNN's demo-rf-pt-benchmark.py,
small, written here.

Each step: a label embedding and the encoder summary through a Linear, log_softmax; ended hypotheses
only extend by EOS (rf.where with rf.sparse_to_dense); rf.top_k over [beam, vocab] gives the new beam and
nested indices (backrefs, labels); the state follows its hypotheses by rf.gather without axis= (taken
from the backrefs' sparse dim); the loop stops on bool(rf.reduce_all(...).raw_tensor). Then the
backtrack with rf.range_over_dim and rf.gather, and the labels stacked by a TensorArray onto a dim whose
lengths (over batch and beam) are a Tensor. Run by tests/rf/test_returnn_programs_beam.py on RETURNN and,
imports edited, on dimtorch.rf: hypotheses, scores and lengths must agree.
"""
import returnn.frontend as rf
from returnn.tensor import Tensor, Dim, TensorDict, batch_dim
from returnn.frontend.tensor_array import TensorArray

time_dim = Dim(Tensor("time", [batch_dim], dtype="int32"))
in_dim = Dim(5, name="in")
vocab_dim = Dim(6, name="vocab")
extern_data = TensorDict({"data": Tensor("data", [batch_dim, time_dim, in_dim], dtype="float32")})
eos_idx = bos_idx = 0
beam_size = 3
max_len = 5


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.hidden = Dim(8, name="hidden")
        self.encoder = rf.Linear(in_dim, self.hidden)
        self.embed = rf.Embedding(vocab_dim, self.hidden)
        self.out = rf.Linear(self.hidden, vocab_dim)


def get_model(*, epoch: int, step: int, **_kwargs):
    return Model()


def forward_step(*, model: Model, extern_data: TensorDict, **_kwargs):
    data = extern_data["data"]
    enc = rf.reduce_mean(rf.tanh(model.encoder(data)), axis=time_dim)
    beam_dim = Dim(1, name="initial-beam")
    batch_dims_ = [batch_dim, beam_dim]
    target = rf.constant(bos_idx, dims=batch_dims_, sparse_dim=vocab_dim)
    seq_log_prob = rf.constant(0.0, dims=batch_dims_)
    ended = rf.constant(False, dims=batch_dims_)
    out_seq_len = rf.constant(0, dims=batch_dims_)
    seq_targets, seq_backrefs = [], []
    i = 0
    while True:
        h = rf.tanh(model.embed(target) + enc)
        log_prob = rf.log_softmax(model.out(h), axis=vocab_dim)
        log_prob = rf.where(ended, rf.sparse_to_dense(eos_idx, axis=vocab_dim, label_value=0.0, other_value=-1e30),
                            log_prob)
        seq_log_prob = seq_log_prob + log_prob
        seq_log_prob, (backrefs, target), beam_dim = rf.top_k(
            seq_log_prob, k_dim=Dim(beam_size, name=f"dec-step{i}-beam"), axis=[beam_dim, vocab_dim])
        seq_targets.append(target)
        seq_backrefs.append(backrefs)
        ended_before = rf.gather(ended, indices=backrefs)
        out_seq_len = rf.gather(out_seq_len, indices=backrefs) + rf.where(ended_before, 0, 1)  # EOS counts
        i += 1
        ended = rf.logical_or(ended_before, target == eos_idx)
        ended = rf.logical_or(ended, rf.copy_to_device(i >= max_len))
        if bool(rf.reduce_all(ended, axis=ended.dims).raw_tensor):
            break
    # backtrack
    seq_targets_ = []
    indices = rf.range_over_dim(beam_dim)
    for backrefs, target in zip(seq_backrefs[::-1], seq_targets[::-1]):
        seq_targets_.insert(0, rf.gather(target, indices=indices))
        indices = rf.gather(backrefs, indices=indices)
    seq_targets__ = TensorArray(seq_targets_[0])
    for target in seq_targets_:
        seq_targets__ = seq_targets__.push_back(target)
    out_spatial_dim = Dim(out_seq_len, name="out-spatial")
    hyps = seq_targets__.stack(axis=out_spatial_dim)
    hyps.mark_as_output("hyps", shape=[batch_dim, beam_dim, out_spatial_dim])
    seq_log_prob.mark_as_output("scores", shape=[batch_dim, beam_dim])
    rf.cast(out_seq_len, "int32").mark_as_output("lengths", shape=[batch_dim, beam_dim])

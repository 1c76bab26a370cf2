"""Program (RETURNN user code): an attention encoder-decoder train step in the style of RETURNN's
demo-rf-pt-benchmark.py, small, written here.

An encoder (Linear + relu over the input frames), targets moved to a vocabulary with one more label by a
marker assignment on a copy (`targets = targets.copy(); targets.sparse_dim = ...`), shift_right with BOS,
then rf.scan over the target frames with an rf.State of an LSTM state (one step, single_step_dim), the
attention context and accumulated weights; per step an MLP attention: Linears, tanh, softmax over the
encoder frames, rf.dot(reduce=enc frames, use_mask=False), merge_dims; then readout with reduce_out
(max of 2 pieces), the outputs packed (pack_padded, enforce_sorted=False), log_softmax, label smoothing
by rf.label_smoothed_log_prob_gradient, cross entropy on log-probs (marked "ce") and the frame error
(marked as an error). Run by tests/rf/test_returnn_programs_train.py on RETURNN and, imports edited, on
dimtorch.rf: losses and every parameter's gradient must agree.
"""
from typing import Sequence

import returnn.frontend as rf
from returnn.tensor import Tensor, Dim, TensorDict, batch_dim, single_step_dim

in_time_dim = Dim(Tensor("in_time", [batch_dim], dtype="int32"))
out_time_dim = Dim(Tensor("out_time", [batch_dim], dtype="int32"))
in_dim = Dim(5, name="in")
vocab_dim = Dim(6, name="vocab")
extern_data = TensorDict(
    {
        "data": Tensor("data", [batch_dim, in_time_dim, in_dim], dtype="float32"),
        "classes": Tensor("classes", [batch_dim, out_time_dim], dtype="int32", sparse_dim=vocab_dim),
    }
)
vocab_ext_dim = vocab_dim + 1  # one more label: BOS and EOS
bos_idx = vocab_ext_dim.dimension - 1


class Model(rf.Module):
    def __init__(self):
        super().__init__()
        self.enc_dim = Dim(8, name="enc")
        self.key_dim = Dim(6, name="key")
        self.heads = Dim(1, name="heads")
        self.encoder = rf.Linear(in_dim, self.enc_dim)
        self.enc_ctx = rf.Linear(self.enc_dim, self.key_dim)
        self.inv_fertility = rf.Linear(self.enc_dim, self.heads, with_bias=False)
        self.embed = rf.Embedding(vocab_ext_dim, Dim(5, name="embed"))
        self.s = rf.LSTM(self.embed.out_dim + self.heads * self.enc_dim, Dim(7, name="lstm"))
        self.weight_feedback = rf.Linear(self.heads, self.key_dim, with_bias=False)
        self.s_transformed = rf.Linear(self.s.out_dim, self.key_dim, with_bias=False)
        self.energy = rf.Linear(self.key_dim, self.heads, with_bias=False)
        self.readout_in = rf.Linear(self.s.out_dim + self.embed.out_dim + self.heads * self.enc_dim,
                                    Dim(10, name="readout"))
        self.output_prob = rf.Linear(self.readout_in.out_dim // 2, vocab_ext_dim)

    def initial_state(self, batch_dims: Sequence[Dim]) -> rf.State:
        state = rf.State(
            s=self.s.default_initial_state(batch_dims=batch_dims),
            att=rf.zeros(list(batch_dims) + [self.heads * self.enc_dim]),
            accum_att_weights=rf.zeros(list(batch_dims) + [in_time_dim, self.heads], feature_dim=self.heads),
        )
        state.att.feature_dim_axis = len(state.att.dims) - 1
        return state

    def step(self, *, enc, enc_ctx, inv_fertility, input_embed, state: rf.State):
        new = rf.State()
        s, new.s = self.s(rf.concat_features(input_embed, state.att), state=state.s, spatial_dim=single_step_dim)
        energy_in = enc_ctx + self.weight_feedback(state.accum_att_weights) + self.s_transformed(s)
        att_weights = rf.softmax(self.energy(rf.tanh(energy_in)), axis=in_time_dim)
        new.accum_att_weights = state.accum_att_weights + att_weights * inv_fertility * 0.5
        att0 = rf.dot(att_weights, enc, reduce=in_time_dim, use_mask=False)
        att0.feature_dim = self.enc_dim
        att, _ = rf.merge_dims(att0, dims=(self.heads, self.enc_dim))
        new.att = att
        return {"s": s, "att": att}, new


def get_model(*, epoch: int, step: int, **_kwargs):
    return Model()


def train_step(*, model: Model, extern_data: TensorDict, **_kwargs):
    data, targets = extern_data["data"], extern_data["classes"]
    enc = rf.relu(model.encoder(data))
    enc_ctx = model.enc_ctx(enc)
    inv_fertility = rf.sigmoid(model.inv_fertility(enc))
    targets = targets.copy()
    targets.sparse_dim = vocab_ext_dim
    input_labels = rf.shift_right(targets, axis=out_time_dim, pad_value=bos_idx)
    input_embeddings = model.embed(input_labels)
    batch_dims = [batch_dim]
    templates = {
        "s": Tensor("s", dims=batch_dims + [model.s.out_dim], dtype=rf.get_default_float_dtype(),
                    feature_dim_axis=-1),
        "att": Tensor("att", dims=batch_dims + [model.heads * model.enc_dim], dtype=rf.get_default_float_dtype(),
                      feature_dim_axis=-1),
    }

    def body(input_embed: Tensor, state: rf.State):
        return model.step(enc=enc, enc_ctx=enc_ctx, inv_fertility=inv_fertility, input_embed=input_embed,
                          state=state)

    ys, _, _ = rf.scan(spatial_dim=out_time_dim, xs=input_embeddings, ys=templates,
                       initial=model.initial_state(batch_dims), body=body)
    readout_in = model.readout_in(rf.concat_features(ys["s"], input_embeddings, ys["att"]))
    readout = rf.reduce_out(readout_in, mode="max", num_pieces=2, out_dim=model.output_prob.in_dim)
    logits = model.output_prob(readout)
    logits_packed, pack_dim = rf.pack_padded(logits, dims=[batch_dim, out_time_dim], enforce_sorted=False)
    targets_packed, _ = rf.pack_padded(targets, dims=[batch_dim, out_time_dim], enforce_sorted=False,
                                       out_dim=pack_dim)
    log_prob = rf.log_softmax(logits_packed, axis=vocab_ext_dim)
    log_prob = rf.label_smoothed_log_prob_gradient(log_prob, 0.1, axis=vocab_ext_dim)
    loss = rf.cross_entropy(target=targets_packed, estimated=log_prob, estimated_type="log-probs",
                            axis=vocab_ext_dim)
    loss.mark_as_loss("ce")
    errors = rf.reduce_argmax(logits_packed, axis=vocab_ext_dim) != targets_packed
    errors.mark_as_loss("fer", as_error=True)

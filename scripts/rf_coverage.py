"""The RETURNN frontend coverage table: every public rf name, dimtorch's counterpart or why there is none.

`python scripts/rf_coverage.py` writes docs/rf_coverage.md from the table below; `--check` exits 1 when
the file is stale, an rf public name (enumerated from the installed returnn: the `__all__` of every
module rf/__init__.py star-imports, and of its sub-packages below) has no entry, an entry names no rf
name, or a counterpart `dt.…` does not exist in dimtorch. tests/rf/test_coverage.py runs these checks.

Status: same = dimtorch has it under rf's name and signature (details in the note); alt = dimtorch
has it spelled otherwise; not yet = missing (why); n/a = not something dimtorch has by design (why).
"""
from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "rf_coverage.md"

SUBPACKAGES = ("audio.mel", "audio.specaugment", "init", "nested", "encoder.base", "encoder.conformer",
               "encoder.conformer_v2", "encoder.transformer", "encoder.e_branchformer", "decoder.transformer",
               "conversions.torch_nn", "conversions.hf_llama", "conversions.espnet_e_branchformer", "hooks")
# rf/cond.py has no __all__; its one public function:
EXTRA = {"cond": ("cond",)}

S, ALT, NOT_YET, NA = "same", "alt", "not yet", "n/a"
EAGER = "dimtorch runs eagerly on torch only; no backend or graph mode to select"
CTX = "RETURNN's run context (train steps, losses, static tracing); dimtorch code is a plain torch training loop"


def _rf(name: str, note: str = "", path: str = "") -> tuple:
    """A name dimtorch.rf has with rf's signature (tests/rf/test_namespace.py); the note says what differs."""
    return name, S, f"dimtorch.rf.{path}{name}", note


# rf module -> [(rf name, status, dimtorch counterpart, note)]
TABLE = {
    "module": [
        ("Module", S, "dt.nn.Module", "a torch.nn.Module (parameters, state_dict, .to(), DDP work unchanged)"),
        ("Functional", S, "dt.nn.Functional", ""),
    ],
    "state": [("State", ALT, "any pytree", "states are dicts, named tuples (LstmState) or classes "
                                             "(CausalSelfAttentionState); scan/while_loop take any of them")],
    "amp": [*[_rf(n, "a policy rf code reads and casts by (amp_cast_*); dimtorch's layers are torch modules, "
                     "torch.autocast applies to them") for n in ("AmpPolicy", "get_amp_policy", "set_amp_policy",
                                                                 "set_amp_policy_ctx", "amp_cast_compute",
                                                                 "amp_cast_float32")]],
    "array_": [
        _rf("convert_to_tensor", "name=, shape= taken; keep_scalar_on_cpu keeps a scalar off the default device"),
        _rf("constant", "convert_to_tensor (the package's rf.constant is rf.const's)", path="array_."),
        _rf("copy", "Tensor.copy()"),
        _rf("cast"), _rf("merge_dims", "the feature marker follows a merge of the feature dim, as rf (dt.merge_dims drops it)"), _rf("split_dims"), _rf("reshape"), _rf("split", "a tuple, as rf"),
        _rf("expand_dim"), _rf("expand_dims", "one view, the new dims first in the given order"), _rf("squeeze"),
        _rf("window", "a view (unfold); int stride (a Tensor stride and a dynamic window_dim: not yet); \"valid\" on a "
                      "sequence shorter than the window: 0 frames (see Differences)"),
        _rf("concat", "dynamic dims sequence by sequence; allow_broadcast=; handle_dynamic_dims=False (batch-dependent)"
                      ": not taken"),
        _rf("concat_features", "concat along the sources' feature dims; the result's feature_dim is the new dim"),
        _rf("pad", "returns a list of out dims, as rf; out_dims= checked against dim math; value may be a Tensor over "
                   "unpadded dims; handle_dynamic_dims=False on a dynamic dim (batch-dependent): not taken"),
        _rf("cum_concat_step", "the frame goes after each sequence's last frame"),
        _rf("slice_update", "a new tensor (index_copy; gradients to both), start an int or a 0-dim Tensor"),
        _rf("stack", "out_dim may be dynamic (e.g. T1 + T2 by dim math): one tensor per frame of its longest sequence"),
        _rf("unstack", "a tuple, as rf"),
        _rf("masked_select", "its out dim's size is read from the device; padding frames are never selected, even "
                             "where the mask holds (rf selects them when dims has the batch dim: see Differences)"),
        _rf("masked_scatter"), _rf("sequence_mask", "like= (a TensorLayout): not taken"),
        _rf("pack_padded", "enforce_sorted=True: not implemented (as in rf)"),
        _rf("pad_packed", "dt.unpack_padded"),
        _rf("gather", "axis= defaults to the indices' sparse_dim; indices without a sparse_dim gather along axis; "
              "indices over axis itself index it anew (a beam backtrack)"),
        _rf("scatter"),
        _rf("scatter_mean"), _rf("scatter_argmax", "dt.scatter(mode=\"argmax\"), invalid_idx as its fill_value"),
        _rf("scatter_logsumexp"), _rf("scatter_logmeanexp"),
        _rf("scatter_count", "padding frames of indices_dim are not counted"),
        _rf("slice", "start/end/size may be Tensors (per-sequence windows; a Tensor end or start without size/"
                     "out_dim is read on the host)"),
        _rf("shift_right"), _rf("shift_left"), _rf("reverse_sequence"), _rf("where"),
        _rf("sort", "(values, indices, out_dim): axis replaced by a new dim of its size or lengths; always stable"),
        _rf("search_sorted"), _rf("sparse_to_dense", "an int label too (axis= then required)"), _rf("one_hot"),
        _rf("top_k_mask", "int k (a Tensor k: not yet); padding never selected"),
        _rf("top_p_mask", "padding never selected"),
        _rf("repeat", "its out dim's lengths are read from the device"), _rf("limit_repeats"),
        _rf("expand_make_non_empty"),
        _rf("real_as_complex", "pair_dim anywhere (moved innermost, contiguous)"), _rf("complex_as_real"),
        _rf("make_complex", "real and imag aligned by dims"),
    ],
    "assert_": [_rf("assert_", "torch._assert_async: no wait for the device (stop=False reads it)")],
    "attention": [
        _rf("dot_attention", "its dropout in training only (the run context's train flag); one SDPA call"),
        ("SelfAttentionBase", ALT, "dt.nn.SelfAttention", "the base of dimtorch's attention modules"),
        ("SelfAttention", S, "dt.nn.SelfAttention", "same qkv layout; out_dim, num_heads, ... attributes"),
        ("CausalSelfAttention", S, "dt.nn.CausalSelfAttention",
         "forward(x, axis=, state=); a full-sequence call returns no state (continuing a prefix step by step: "
         "not yet); default_initial_state(batch_dims=) without capacity="),
        ("CausalSelfAttentionState", S, "dt.nn.CausalSelfAttentionState", "k, v over (batch..., heads, history, d)"),
        ("RotaryPosSelfAttention", S, "dt.nn.RotaryPosSelfAttention", ""),
        ("RotaryPosCausalSelfAttention", S, "dt.nn.RotaryPosCausalSelfAttention", ""),
        ("RelPosSelfAttention", S, "dt.nn.RelPosSelfAttention",
         "Transformer-XL form (linear_pos, pos_bias_u/v); options pos_emb=\"sinusoidal\"|\"learned\", clipping= "
         "instead of rf's with_linear_pos/with_pos_bias/learnable_pos_emb/separate_pos_emb_per_head flags"),
        ("RelPosCausalSelfAttention", S, "dt.nn.RelPosCausalSelfAttention",
         "rf's options and parameter names; full sequence (causal mask) and step by step (axis=None); a "
         "full-sequence call returns no state (continuing a prefix step by step: not yet); x's padding zeroed "
         "before the projection"),
        ("CrossAttention", S, "dt.nn.CrossAttention",
         "forward(x, encoder, axis=, enc_axis=) instead of transform_encoder() + a state; query Linear named "
         "`query` (rf: `q`); positional args (query in_dim, encoder_dim) — pass rf's by keyword"),
        ("LearnedRelativePositionalEncoding", ALT, "dt.nn.RelPosSelfAttention",
         "pos_emb=\"learned\" (clipped learned relative embeddings inside the module)"),
        _rf("relative_positional_encoding"),
        _rf("sinusoidal_positional_encoding", "spatial_dim=None is rf's single_step_dim"),
        _rf("sinusoidal_encoding"),
    ],
    "backend": [
        _rf("select_backend", "\"torch\" only"), _rf("get_selected_backend", "\"torch\""),
        *[_rf(n, "raises: dimtorch runs on torch only") for n in ("select_backend_numpy", "select_backend_tf",
                                                                    "select_backend_returnn_layers_tf")],
        _rf("select_backend_torch", "a no-op"), _rf("is_executing_eagerly", "True"),
        _rf("is_backend_raw_tensor_dim_tag_independent",
            "False: masks are cached per Dim, not shared across copy_from dims"),
    ],
    "build_from_dict": [(n, NA, None, "RETURNN config dicts; dimtorch modules are built in Python")
                        for n in ("build_from_dict", "build_dict")],
    "cond": [_rf("cond", "a Tensor pred is read from the device (the branch depends on data)")],
    "const": [
        _rf("full"), _rf("fill", "dt.full"), _rf("constant", "full with the value first; an int value gives int64 "
                                                            "(rf: int32)"),
        _rf("zeros"), _rf("ones"), _rf("zeros_like"), _rf("ones_like"),
    ],
    "container": [
        ("ModuleList", S, "dt.nn.ModuleList", "list- and dict-like (names, slices, items())"),
        ("Sequential", S, "dt.nn.Sequential", "a torch.nn.Sequential built and called as rf's: from a generator "
         "or dict, kwargs to every module, collected_outputs="),
        ("sequential", S, "dt.nn.sequential", ""),
        ("ParameterList", S, "dt.nn.ParameterList", "of dt.nn.Parameter; indexing gives Tensors"),
    ],
    "control_flow_ctx": [_rf("control_flow_ctx", "a no-op block (loops and conds run eagerly)"),
                         _rf("get_current_control_flow_ctx", "None")],
    "conv": [
        _rf("conv", "padding \"valid\", \"same\" or ints; 1-3 spatial dims; out_spatial_dims= checked against the "
                    "computed dims; x's padding always zeroed (use_mask=False changes nothing)"),
        ("Conv1d", S, "dt.nn.Conv1d", "out_dim may be in_dim"), ("Conv2d", S, "dt.nn.Conv2d", ""),
        ("Conv3d", S, "dt.nn.Conv3d", ""),
        _rf("transposed_conv", "out_spatial_dims= checked against the computed dims"),
        ("TransposedConv1d", S, "dt.nn.TransposedConv1d", ""), ("TransposedConv2d", S, "dt.nn.TransposedConv2d", ""),
        ("TransposedConv3d", S, "dt.nn.TransposedConv3d", ""),
        _rf("pool", "avg with padding=\"same\" or ints averages each sequence's own frames (see Differences); "
                    "dilation_rate other than 1: not taken"),
        _rf("max_pool", "pool(mode=\"max\")"), _rf("max_pool1d", "(tensor, out dim), as rf"),
        _rf("pool1d", "(tensor, out dim), as rf"), _rf("pool2d"), _rf("pool3d"),
        _rf("make_conv_out_spatial_dims", "the very dims conv/pool return"),
        _rf("calc_conv_out_length", "ints, Tensors of lengths, or a Dim (dim math)"),
        _rf("make_transposed_conv_out_spatial_dims"),
        _rf("calc_transposed_conv_out_length", "ints, Tensors of lengths, or a Dim (dim math)"),
    ],
    "device": [
        _rf("copy_to_device", "None: the default device; the dims' lengths stay on the host"),
        *[_rf(n, "dimtorch's creation ops (zeros, ones, full, random_*, range_over_dim, convert_to_tensor) and "
                 "rf.Parameter (so every rf module's parameters) put new tensors there when given no device") for n in ("get_default_device", "set_default_device",
                                                                   "set_default_device_ctx")],
        _rf("get_default_dim_size_device", "\"cpu\": lengths always live on the host"),
    ],
    "dims": [
        _rf("range_over_dim", "dtype None: int64 (rf: int32); a float dtype has no sparse_dim, as rf"),
        _rf("range_over_dim_strided", "stride an int (a device Tensor stride: not taken, dims' lengths are host values)"),
        _rf("range_over_merged_dims", "the first dim may be dynamic (T * k, the dim merge_dims makes)"),
        _rf("linspace_over_dim", "per sequence over a dynamic dim, as rf"),
        _rf("replace_dim", "a new dim named as in_dim (rf: \"new-dim\"); an unknown out_dim (Dim(None)) takes in_dim's lengths, as rf"),
        _rf("replace_dim_v2", "frames beyond each sequence's old length are 0 (rf: the raw padding)"),
        _rf("set_sparse_dim", "a new Tensor over the same raw"),
        _rf("dim_match_priority_when_needed", "dims are identities: a distinct dim of the same size (or lengths) "
                                              "when other_dims holds dim"),
        _rf("num_elements_of_shape", "from the host lengths; source= (packed storage): not taken"),
        _rf("masked_fraction_of_shape"), _rf("last_frame_position_of_dim"),
        _rf("use_mask_default", "True: dimtorch masks by default (as rf's newest behavior version)"),
    ],
    "dropout": [_rf("dropout", "in training only (the run context's train flag, or on_forward), as rf; "
                                 "dt.dropout's mask (axis: the mask's dims)"),
                _rf("dropout_broadcast_default", "True (rf's default without a config)")],
    "dtype": [
        *[_rf(n, "torch's default dtype") for n in ("get_default_float_dtype", "set_default_float_dtype",
                                                    "set_default_float_dtype_ctx")],
        *[_rf(n, "int64, dimtorch's index dtype (rf: int32)") for n in ("get_default_int_dtype",
                                                                        "get_default_array_index_dtype")],
        _rf("is_float_dtype"),
    ],
    "gradient": [
        _rf("set_requires_gradient", "the raw's requires_grad_()"),
        _rf("gradient", "torch.autograd.grad on the raws (create_graph=True)"),
        _rf("stop_gradient", "the raw detached"), _rf("stop_gradient_scope", "torch.no_grad()"),
        _rf("scaled_gradient", "scale 0: the gradient stopped, as rf"),
        _rf("scaled_gradient_ext", "the sum over scale_shift_by_sum_over_axis leaves out padding frames (rf sums them "
                                   "too: batch-dependent)"),
        _rf("gradient_checkpoint_scope", "a block run as without it (same results, activations kept; "
                                         "torch.utils.checkpoint recomputes a function's)"),
    ],
    "graph": [(n, NA, None, "graph introspection of RETURNN's layers backend")
              for n in ("get_tensor_dependencies", "get_tensor_consumers", "walk_tensor_consumers")],
    "label_smoothing": [
        _rf("label_smoothing", "probabilities, or int labels via smooth_one_hot"),
        _rf("smooth_one_hot", "a label out of range gives the other value everywhere"),
        _rf("label_smoothed_log_prob_gradient"),
    ],
    "linear": [("Linear", S, "dt.nn.Linear", "weight (out, in): torch's layout"), ("Embedding", S, "dt.nn.Embedding", "")],
    "loop": [
        _rf("while_loop", "a Tensor cond is read from the device once per iteration"),
        _rf("scan", "eager, as rf's torch backend; return_tensor_arrays gives lists of steps"),
    ],
    "loss": [
        _rf("cross_entropy", "index targets of any int dtype (int32 as RETURNN's data)"),
        _rf("ctc_loss", "F.ctc_loss; use_native_op= any (the same loss); logits may have dims the targets lack "
                        "(broadcast); max_approx=True and label_loop=False: not taken"),
        _rf("ctc_best_path", "Viterbi in torch ops, one step per frame of the raw time size and back (no device read; "
                             "RETURNN uses a native op; torch scans under torch.compile/export: one graph for every "
                             "length); a sequence without a path gets blank on every frame"),
        _rf("ctc_greedy_decode", "the decoded lengths are read from the device"),
        _rf("ctc_durations_from_path", "without targets_spatial_dim the label counts are read on the host (as in rf); "
                                       "the check is a device-side assert (with stop_on_failed_check=False, none)"),
        _rf("ctc_no_label_loop_blank_durations_from_path", "as ctc_durations_from_path"),
        _rf("edit_distance", "no device reads"),
    ],
    "math_": [
        _rf("compare", "rf's order (a, kind, b) and dimtorch's (a, b, kind); dim_order="),
        _rf("compare_bc"),
        _rf("combine", "rf's order (a, kind, b) and dimtorch's (a, b, kind); dim_order=; without "
            "allow_broadcast_all_sources an outer broadcast follows the operators' rule, which dimtorch.rf sets to "
            "RETURNN's (broadcast over all sources; dimtorch.rf.set_operators_broadcast_all_sources)"),
        _rf("combine_bc"),
        *[_rf(n, f"operator.{n2} (Tensor's C number slot)") for n, n2 in (
            ("equal", "eq"), ("not_equal", "ne"), ("less", "lt"), ("less_equal", "le"), ("greater", "gt"),
            ("greater_equal", "ge"), ("add", "add"), ("sub", "sub"), ("mul", "mul"), ("true_divide", "truediv"),
            ("floor_divide", "floordiv"), ("mod", "mod"), ("pow", "pow"))],
        _rf("ceil_divide", "-(-a // b)"), _rf("neg"), _rf("reciprocal", "1.0 / a"), _rf("squared_difference"),
        _rf("logical_and"), _rf("logical_or"), _rf("logical_not"),
        _rf("opt_logical_or", "Python bools short-cut"), _rf("opt_logical_and", "Python bools short-cut"),
        _rf("log_add_exp"), _rf("is_finite"), _rf("is_infinite"), _rf("is_neg_infinite"),
        _rf("maximum", "more operands (rf's *other_tensors) fold left to right"),
        _rf("minimum", "more operands (rf's *other_tensors) fold left to right"),
        _rf("clip_by_value", "dt.clip"), _rf("identity"),
        *[_rf(n) for n in ("exp", "expm1", "log", "safe_log", "log1p", "sqrt", "rsqrt", "square", "abs", "tanh",
                           "sigmoid", "log_sigmoid", "sin", "cos", "ceil", "floor", "round", "relu")],
        _rf("relu_square", "dt.square(dt.relu(x))"), _rf("elu"), _rf("selu"), _rf("silu"), _rf("swish", "dt.silu"),
        _rf("gelu"), _rf("softmax"), _rf("log_softmax"), _rf("gating"),
        _rf("lerp", "torch.lerp where the dtypes allow it"), _rf("cumsum", "spatial_dim= (or dimtorch's axis=)"),
    ],
    "matmul": [_rf("matmul", "use_mask=True by default, as rf; reduce=[]: the product over all dims (outer product)"),
               _rf("dot", "as matmul")],
    "normalization": [
        _rf("moments", "the biased variance (correction=, distributed=: not taken)"), ("LayerNorm", S, "dt.nn.LayerNorm", ""), ("RMSNorm", S, "dt.nn.RMSNorm", ""),
        ("GroupNorm", S, "dt.nn.GroupNorm", "rf's per-frame form (statistics over each group's channels only)"),
        ("GroupNormSpatial", S, "dt.nn.GroupNormSpatial", "statistics over valid frames only (batch independent)"),
        ("BatchNorm", S, "dt.nn.BatchNorm", "affine=; parameters scale/bias, buffers running_mean/running_var "
                                            "(rf: gamma/beta, running_variance)"),
        ("batch_norm_distributed_default", NA, None, "no RETURNN config"),
        _rf("normalize", "valid frames only; a's padding zeroed first when axis has a dynamic dim"),
        ("Normalize", S, "dt.nn.Normalize", ""),
    ],
    "packed": [(n, NA, None, "rf's packed-tensor backend; dimtorch packs with dt.pack_padded / dt.unpack_padded")
               for n in ("pack", "pack_import", "unpack", "packed_regap", "packed_flat_content", "is_packed")],
    "parameter": [("Parameter", S, "dt.nn.Parameter", "the named view of a torch.nn.Parameter"),
                  ("set_parameter_copy_behavior_ctx", NA, None, "torch's Parameter semantics")],
    "parametrizations": [
        ("weight_dropout", S, "dt.nn.weight_dropout", "in training (the module's train flag); the dropped weight is "
         "kept for backward (rf recomputes it in a gradient checkpoint scope)"),
        ("WeightDropout", S, "dt.nn.WeightDropout", "a parametrization module"),
        ("weight_noise", S, "dt.nn.weight_noise", "in training; the noised weight is kept for backward"),
        ("WeightNoise", S, "dt.nn.WeightNoise", "a parametrization module"),
    ],
    "parametrize": [
        ("register_parametrization", S, "dt.nn.register_parametrization", "per module instance (a copy gets its "
         "own); keep_existing_param as rf's"),
        ("remove_parametrization", S, "dt.nn.remove_parametrization", ""),
        ("is_parametrized", S, "dt.nn.is_parametrized", ""),
    ],
    "piecewise_linear": [_rf("PiecewiseLinear", "elementwise on a Tensor (torch.searchsorted); for LR schedules "
                                                "torch's schedulers remain the usual way")],
    "rand": [
        _rf("set_random_seed", "torch.manual_seed"), _rf("get_random_state", "torch's generator states"),
        _rf("set_random_state", "torch's generator states"),
        ("reset_step_random_state", NA, "dimtorch.rf.reset_step_random_state", "raises: " + CTX),
        ("get_static_step_based_seed", NA, "dimtorch.rf.get_static_step_based_seed", "raises: " + CTX),
        _rf("random", "distribution \"uniform\" (bound=), \"normal\", \"truncated_normal\"; explicit states, static=, "
                      "out=: not taken"),
        _rf("random_uniform", "an int dtype draws integers; maxval None: the sparse_dim's size for an int dtype; "
                              "explicit states, static=, out=: not taken"),
        _rf("random_normal", "explicit states, static=, out=: not taken"),
        _rf("random_truncated_normal", "seed=/generator= as random_normal; no explicit_state"),
        _rf("random_choice_without_replacement", "Gumbel top-k"),
        _rf("random_choice_with_replacement", "torch.multinomial; padding never drawn"),
    ],
    "rec": [("LSTM", S, "dt.nn.LSTM", "torch's kernel; layers and bidirectional"), ("LstmState", S, "dt.nn.LstmState", ""),
            ("ZoneoutLSTM", S, "dt.nn.ZoneoutLSTM",
             "rf's parameters (ff_weight, rec_weight, bias) and options; a per-frame Python loop (one torch scan "
             "under torch.compile/export: one graph for every length); state=None means "
             "zeros; spatial_dim=None is one step; training follows torch's module.training (rf: the run "
             "context's train flag)")],
    "reduce": [
        _rf("reduce", "reduce_<mode>"),
        *[_rf(n) for n in ("reduce_max", "reduce_min", "reduce_mean", "reduce_logsumexp", "reduce_any", "reduce_all",
                           "reduce_argmin", "reduce_argmax")],
        _rf("reduce_sum", "distributed=: not taken"),
        _rf("reduce_logmeanexp", "reduce_logsumexp minus the log of each sequence's frame count (cached lengths); an "
                                 "empty sequence gives -inf"),
        _rf("reduce_out", "modes max, sum, mean, min"),
        _rf("RunningMean", "dt.nn.RunningMean: a buffer (no gradient, in the state dict); valid frames only"),
        _rf("top_k", "k_dim=; several axes give a list of indices, as rf"),
    ],
    "run_ctx": [(n, NA, None, CTX) for n in ("RunCtx", "Loss", "get_run_ctx", "get_run_ctx_step",
                                             "init_train_step_run_ctx", "init_forward_step_run_ctx")],
    "signal": [_rf("stft", "frames per sequence by dim math; window_use_frame_length=False counts frames of fft_length "
                           "(rf counts frame_length)")],
    "static_traceable": [(n, NA, None, "RETURNN's static tracing; dimtorch's compile support: issue 12")
                         for n in ("is_static_traceable", "set_static_traceable", "set_static_traceable_ctx",
                                   "static_traceable_generation")],
    "stepwise_scheduler": [("PiecewiseLinearStepwiseScheduler", NA, None, "schedules: torch's LR schedulers")],
    "tensor_layout": [(n, NA, None, "layouts are the raws' dims orders") for n in ("TensorLayout", "get_tensor_layout")],
    "types": [("Tensor", S, "dt.Tensor", ""), ("Dim", S, "dt.Dim", "identity equality; dim math"),
              *[_rf(n, "typing names") for n in ("RawTensorTypes", "ItemKeyType", "GetModelFunc", "StepFunc")],
              _rf("get_raw_tensor_type", "torch.Tensor")],
    "audio.mel": [_rf("mel_filterbank", path="audio."), _rf("log_mel_filterbank_from_raw", path="audio.")],
    "audio.specaugment": [
        _rf("specaugment", "training = the run context's train flag, step = its step (dt.audio.specaugment takes "
                           "them as arguments); count range per sequence (rf's newest); no device read", path="audio."),
        _rf("random_mask", "counts drawn and gated on the device, slots a host bound (rf's static-traceable form; its "
                           "eager form reads the counts' max)", path="audio."),
        _rf("mask", "generator=", path="audio."),
    ],
    "init": [
        ("ParamInit", ALT, "dt.nn.init.Initializer", ""), ("ParamInitType", ALT, "dt.nn.init.Initializer", ""),
        *[(n, S, f"dt.nn.init.{n}", "") for n in ("Normal", "VarianceScaling", "Glorot", "He", "HeNormal",
                                                 "HeUniform")],
    ],
    "nested": [
        _rf("mask_nested", "two different dims merge into a new one with lengths where(mask, ...) (host: mask_cpu or "
                           "the mask read from the device)", path="nested."),
        _rf("gather_nested", "a dim with lengths over the gathered dim gets gathered lengths (a device read of the "
                             "indices)", path="nested."),
        _rf("where_nested", "merging two different dims: not yet", path="nested."),
        _rf("masked_select_nested", path="nested."), _rf("masked_scatter_nested", path="nested."),
    ],
    "encoder.base": [(n, NA, None, "typing interfaces") for n in ("IEncoder", "ISeqFramewiseEncoder",
                                                                 "ISeqDownsamplingEncoder")],
    "encoder.conformer": [
        ("ConformerPositionwiseFeedForward", S, "dt.nn.ConformerPositionwiseFeedForward", ""),
        ("ConformerConvBlock", S, "dt.nn.ConformerConvBlock", ""),
        ("ConformerConvSubsample", S, "dt.nn.ConformerConvSubsample", ""),
        ("ConformerEncoderLayer", S, "dt.nn.ConformerEncoderLayer", "ff, ff_activation, conv_norm(_opts), "
         "self_att(_opts), norm as rf's (no config dicts); conv_norm BatchNorm always masks (rf's use_mask=False "
         "default: padding in the statistics, batch-dependent)"),
        ("ConformerEncoder", S, "dt.nn.ConformerEncoder", ""),
        ("make_ff", S, "dt.nn.make_ff", "no config dicts; a class of dimtorch's FeedForward family gets out_dim as "
                                        "its in_dim"),
        ("conv_norm_use_mask_default", NA, None, "no behavior versions"),
    ],
    "encoder.conformer_v2": [
        ("ConformerFrontend", S, "dt.nn.ConformerFrontend", "input_layer a module or callable (rf's dict form "
         "for build_from_dict: not taken); V1's parameter names"),
        ("ConformerEncoderV2", S, "dt.nn.ConformerEncoderV2", "encoder_layer a module, class or None (dict: not "
         "taken)"),
    ],
    "encoder.transformer": [
        ("TransformerEncoder", S, "dt.nn.TransformerEncoder",
         "full sequence (no step state); no config dicts, no sequential=; a layer built per layer (a given module "
         "is deep-copied with its values: rf re-initializes); padding zeroed before the first layer"),
        ("TransformerEncoderLayer", S, "dt.nn.TransformerEncoderLayer",
         "zeroes x's padding first (NaN padding would reach valid gradients through layer norm's backward and "
         "the attention); a causal self_att's state is dropped"),
    ],
    "encoder.e_branchformer": [
        ("EBranchformerLayer", S, "dt.nn.EBranchformerLayer",
         "usable as ConformerEncoderV2's encoder_layer; zeroes x's padding first (as TransformerEncoderLayer); "
         "no config dicts; dt.nn.LayerNorm's eps 1e-5 (rf's 1e-6)"),
        ("FeedForwardConvGated", S, "dt.nn.FeedForwardConvGated",
         "activation names or callables (no config dicts); zeroes x's padding first (NaN padding times the "
         "conv's padding outputs would reach valid frames' gradients)"),
        ("Merge", S, "dt.nn.Merge", ""),
    ],
    "decoder.transformer": [
        ("TransformerDecoder", S, "dt.nn.TransformerDecoder", "full sequence and step by step"),
        ("TransformerDecoderLayer", S, "dt.nn.TransformerDecoderLayer", ""),
        ("FeedForward", S, "dt.nn.FeedForward", ""),
        ("FeedForwardGated", S, "dt.nn.FeedForwardGated", "activation names or callables (no config dicts)"),
        ("make_norm", S, "dt.nn.make_norm", "no config dicts"),
    ],
    "conversions.torch_nn": [(n, NA, None, "dimtorch modules hold torch's parameter layouts: load the torch module's "
                                           "state_dict") for n in ("import_params_torch_linear_to_rf",
                                                                   "import_params_torch_conv1d_to_rf",
                                                                   "import_params_torch_layer_norm_to_rf")],
    "conversions.hf_llama": [(n, NA, None, "model import from Hugging Face Llama")
                             for n in ("import_params_hf_llama_to_rf_transformer_decoder",
                                       "import_params_hf_llama_decoder_layer_to_rf",
                                       "import_params_hf_llama_mlp_to_rf_feed_forward_gated",
                                       "import_params_hf_llama_rms_norm_to_rf",
                                       "import_params_hf_llama_att_to_rf_rotary_att")],
    "conversions.espnet_e_branchformer": [(n, NA, None, "model import from ESPnet")
                                          for n in ("import_params_espnet_e_branchformer_layer_to_rf",
                                                    "import_params_espnet_positionwise_feed_forward_to_rf",
                                                    "import_params_espnet_multi_headed_attention_to_rf",
                                                    "import_params_espnet_convolutional_gating_mlp_to_rf")],
    "hooks": [(n, ALT, "torch module hooks", "") for n in ("setup_post_hook_on_method", "RemovableHandle")],
}

DIFFERENCES = """\
## Differences (found by running both; pinned by tests/rf/test_parity.py)

RETURNN frontend is run at its newest behavior version (as a new RETURNN config sets it). At its
minimum version (what bench/ops_bench.py used until 2026-12; rf falls back to it when no version is
set) rf does not mask padding in conv/pool/stft inputs and pads "same" with strides by the padded
length, so its results there depend on the batch; the comparisons below are at the newest version.

- **avg pool with padding="same"** (any stride; odd windows): rf pads with torch's own padding, which
  `count_include_pad=False` leaves out of the average, but masks the padding of shorter sequences with
  0 and counts those frames. A shorter sequence's last output frame (whose window reaches past its end)
  then differs between the batch and the sequence alone: rf is batch-dependent there. dimtorch averages
  over each sequence's own frames, which equals rf on every sequence alone. Kept. (Even windows: rf pads
  explicitly with zeros that count, dividing by the full window; dimtorch again counts the sequence's
  frames only.) The same holds for avg pool with int padding: rf counts a shorter sequence's masked
  frames within p of its end, dimtorch only its own frames (max pool with int padding agrees).
- **window(padding="valid")** on a sequence shorter than the window: rf's dim math gives it frames
  (T - W + 1 < 0, then the stride's ceildiv, rounds up), windows that reach past its end; dimtorch gives
  0 frames, as conv and pool with "valid". Longer sequences agree.
- **copy_masked** agrees with rf everywhere (all dims orders, lengths over one or two batch dims, dims
  from dim math). The reported difference (max |diff| 0.43 on valid frames) is rf's own test program
  `test_copy_masked`: `x.copy_masked(1)` followed by an avg pool with padding="same", i.e. the avg-pool
  difference above.
- **max pool with padding="same", stride > 1** agrees with rf at its newest behavior version (rf's
  "consistent same padding", version >= 24, equals dimtorch's: k - 1 frames, left (k - 1) // 2,
  whatever the length). The difference came from rf's minimum version.
- **scan with cond**: rf's rule is kept: the step whose new state turns an entry's cond false counts
  for the lengths and outputs, but that new state is dropped (the entry keeps the state from before).
- **stft(window_use_frame_length=False)**: rf counts frames as for windows of frame_length while its
  torch.stft call makes frames of fft_length; dimtorch counts frames of fft_length (the frames it
  returns). Equal for the default (True) and when frame_length == fft_length.
- **replace_dim_v2**: frames beyond each sequence's old length are 0 in dimtorch; rf keeps
  the raw padding there (what the padded tensor held). Equal once the input's padding is 0.
"""


def rf_public_names() -> dict:
    """rf module -> its public names, from the installed returnn (its modules' __all__)."""
    import returnn.frontend as rf
    names = {}
    for module in re.findall(r"^from \.(\w+) import \*", Path(rf.__file__).read_text(), re.M):
        mod = importlib.import_module("returnn.frontend." + module)
        names[module] = tuple(getattr(mod, "__all__", None) or EXTRA.get(module, ()))
    for module in SUBPACKAGES:
        mod = importlib.import_module("returnn.frontend." + module)
        names[module] = tuple(getattr(mod, "__all__", None) or _defined_in(mod))
    return names


def _defined_in(mod) -> list:
    """Public classes and functions a module without __all__ defines itself."""
    return [n for n, v in vars(mod).items()
            if not n.startswith("_") and getattr(v, "__module__", None) == mod.__name__]


def _resolve(path: str):
    """The object a counterpart `dt.X...` or `dimtorch.rf.X...` names, or None."""
    import dimtorch as dt
    parts = path.split(".")
    if parts[:2] == ["dimtorch", "rf"]:
        import dimtorch.rf
        obj, parts = dimtorch.rf, parts[2:]
    else:
        obj, parts = dt, parts[1:]
    for part in parts:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _binding(path: str) -> str:
    """How a dimtorch.rf name is bound: "`dt.X` itself" (the op: its speed and graph capture), or ""."""
    import dimtorch as dt
    obj = _resolve(path)
    if obj is None or isinstance(obj, type):
        return ""
    name = path.split(".")[-1]
    for where, module in (("dt", dt), ("dt.audio", dt.audio), ("dt.nn", dt.nn)):
        if getattr(module, name, None) is obj:
            return f"`{where}.{name}` itself"
    import functools
    import operator
    for other in dir(dt):
        if not other.startswith("_") and getattr(dt, other) is obj:
            return f"`dt.{other}` itself"
    if isinstance(obj, functools.partial):
        inner = next((f"dt.{n}" for n in dir(dt) if not n.startswith("_") and getattr(dt, n) is obj.func), "its op")
        fixed = ", ".join(f"{k}={v!r}" for k, v in obj.keywords.items())
        return f"`{inner}` with {fixed} (a functools.partial: no Python frame)"
    if any(getattr(operator, n, None) is obj for n in dir(operator)):
        return "Python's operator function"
    return "thin function" if callable(obj) and getattr(obj, "__module__", "").startswith("dimtorch.rf") else ""


def problems(check_rf: bool = True) -> list:
    found = []
    for module, entries in TABLE.items():
        seen = set()
        for name, status, counterpart, note in entries:
            if name in seen:
                found.append(f"{module}.{name}: listed twice")
            seen.add(name)
            if status not in (S, ALT, NOT_YET, NA):
                found.append(f"{module}.{name}: unknown status {status!r}")
            if status in (S, ALT) and not counterpart:
                found.append(f"{module}.{name}: status {status} needs a counterpart")
            if status in (NOT_YET, NA) and not note:
                found.append(f"{module}.{name}: status {status} needs a reason")
            if status in (S, ALT) and counterpart and re.fullmatch(r"(dt|dimtorch\.rf)(\.\w+)+", counterpart) \
                    and _resolve(counterpart) is None:
                found.append(f"{module}.{name}: {counterpart} does not exist in dimtorch")
    if check_rf:
        have = rf_public_names()
        for module, names in have.items():
            listed = {e[0] for e in TABLE.get(module, ())}
            for name in names:
                if name not in listed:
                    found.append(f"rf.{module}.{name}: public in the installed returnn but not in the table")
            for name in listed - set(names):
                found.append(f"rf.{module}.{name}: in the table but not public in the installed returnn")
        for module in TABLE:
            if module not in have:
                found.append(f"rf.{module}: in the table but not a module of the installed returnn")
    return found


def _prefix(module: str) -> str:
    return "rf." + module + "." if "." in module else "rf."


def render() -> str:
    counts = {}
    for entries in TABLE.values():
        for _, status, _, _ in entries:
            counts[status] = counts.get(status, 0) + 1
    total = sum(counts.values())
    lines = [
        "# RETURNN frontend coverage",
        "",
        "Every public name of RETURNN frontend (`returnn.frontend`, its `__all__` lists, and the sub-packages "
        "audio, init, nested, encoder, decoder, conversions, hooks), with dimtorch's counterpart. Generated by "
        "`python scripts/rf_coverage.py` from its table; `tests/rf/test_coverage.py` checks that the table "
        "lists every name the installed returnn has and that every `dt.…` counterpart exists. Side-by-side "
        "results: `tests/rf/test_parity.py`.",
        "",
        f"{total} names: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in (S, ALT, NOT_YET, NA)) + ". "
        "Status: **same** = dimtorch has it under rf's name (keyword names as rf's unless the note says; a "
        "`dimtorch.rf.X` counterpart has rf's module path and signature, checked by tests/rf/test_namespace.py, and "
        "the note says whether it is dimtorch's op itself or a thin function over it); "
        "**alt** = spelled otherwise; **not yet** = missing (why); **n/a** = not something dimtorch has by "
        "design (why).",
        "",
        _ASR_MT,
        "",
        DIFFERENCES,
    ]
    for module, entries in TABLE.items():
        lines += ["", f"## rf.{module}", "", "| rf | status | dimtorch | note |", "|---|---|---|---|"]
        for name, status, counterpart, note in entries:
            cp = f"`{counterpart}`" if counterpart else ""
            if counterpart and counterpart.startswith("dimtorch.rf.") and status == S:
                how = _binding(counterpart)
                note = f"{how}; {note}" if how and note else how or note
            lines.append(f"| `{_prefix(module)}{name}` | {status} | {cp} | {note} |")
    return "\n".join(lines) + "\n"


_ASR_MT = """\
## What an ASR/MT model needs and is still missing

The layers and ops of the models here (Conformer + CTC, Transformer encoder-decoder, LSTM, attention
decoders, CTC greedy decoding, beam search over dims with gather_nested, WER by edit_distance) are all
there, with the differences and limits named in the notes above (e.g. `rf.ctc_loss`'s max_approx and
label_loop options, a causal self-attention continued from a full-sequence call's state, a Tensor stride of
`rf.window`), the E-Branchformer layer included (usable in ConformerEncoderV2). A transducer (RNN-T) loss
is in neither rf nor dimtorch."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the doc is stale or the table is off")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "python"))
    try:
        import returnn  # noqa: F401
        check_rf = True
    except ImportError:
        check_rf = False
    found = problems(check_rf)
    text = render()
    if args.check:
        if DOC.read_text() != text:
            found.append(f"{DOC.relative_to(ROOT)} is stale: run python scripts/rf_coverage.py")
        for line in found:
            print(line)
        return 1 if found else 0
    DOC.write_text(text)
    for line in found:
        print(line, file=sys.stderr)
    print(f"wrote {DOC.relative_to(ROOT)}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

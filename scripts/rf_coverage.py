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

# rf module -> [(rf name, status, dimtorch counterpart, note)]
TABLE = {
    "module": [
        ("Module", S, "dt.nn.Module", "a torch.nn.Module (parameters, state_dict, .to(), DDP work unchanged)"),
        ("Functional", S, "dt.nn.Functional", ""),
    ],
    "state": [("State", ALT, "any pytree", "states are dicts, named tuples (LstmState) or classes "
                                             "(CausalSelfAttentionState); scan/while_loop take any of them")],
    "amp": [(n, ALT, "torch.autocast", "dimtorch modules are torch modules: torch's autocast applies")
            for n in ("AmpPolicy", "get_amp_policy", "set_amp_policy", "set_amp_policy_ctx", "amp_cast_compute",
                      "amp_cast_float32")],
    "array_": [
        ("convert_to_tensor", S, "dt.convert_to_tensor", ""),
        ("constant", ALT, "dt.full", ""),
        ("copy", ALT, "Tensor.copy()", ""),
        ("cast", S, "dt.cast", ""),
        ("merge_dims", S, "dt.merge_dims", ""),
        ("split_dims", S, "dt.split_dims", ""),
        ("reshape", S, "dt.reshape", ""),
        ("split", S, "dt.split", ""),
        ("expand_dim", S, "dt.expand_dim", ""),
        ("expand_dims", S, "dt.expand_dims", "one view, the new dims first in the given order"),
        ("squeeze", S, "dt.squeeze", ""),
        ("window", S, "dt.window", "a view (unfold); int stride (a Tensor stride and a dynamic window_dim: not yet); "
                                   "\"valid\" on a sequence shorter than the window: 0 frames (see Differences)"),
        ("concat", S, "dt.concat", "dynamic dims sequence by sequence"),
        ("concat_features", ALT, "dt.concat", "concat along the feature dims"),
        ("pad", S, "dt.pad", "value may be a Tensor over unpadded dims"),
        ("cum_concat_step", S, "dt.cum_concat_step", "the frame goes after each sequence's last frame"),
        ("slice_update", S, "dt.slice_update", "a new tensor (index_copy; gradients to both), start an int or a 0-dim "
         "Tensor"),
        ("stack", S, "dt.stack", ""),
        ("unstack", S, "dt.unstack", ""),
        ("masked_select", S, "dt.masked_select", "its out dim's size is read from the device"),
        ("masked_scatter", S, "dt.masked_scatter", ""),
        ("sequence_mask", S, "dt.sequence_mask", ""),
        ("pack_padded", S, "dt.pack_padded", ""),
        ("pad_packed", ALT, "dt.unpack_padded", ""),
        ("gather", S, "dt.gather", "axis= required"),
        ("scatter", S, "dt.scatter", ""),
        ("scatter_mean", ALT, "dt.scatter", "mode=\"mean\""),
        ("scatter_argmax", ALT, "dt.scatter", "mode=\"argmax\""),
        ("scatter_logsumexp", ALT, "dt.scatter", "mode=\"logsumexp\""),
        ("scatter_logmeanexp", ALT, "dt.scatter", "mode=\"logmeanexp\""),
        ("scatter_count", S, "dt.scatter_count", "padding frames of indices_dim are not counted"),
        ("slice", S, "dt.slice", ""),
        ("shift_right", S, "dt.shift_right", ""),
        ("shift_left", S, "dt.shift_left", ""),
        ("reverse_sequence", S, "dt.reverse_sequence", ""),
        ("where", S, "dt.where", ""),
        ("sort", S, "dt.sort", ""),
        ("search_sorted", S, "dt.search_sorted", ""),
        ("sparse_to_dense", S, "dt.sparse_to_dense", ""),
        ("one_hot", S, "dt.one_hot", ""),
        ("top_k_mask", S, "dt.top_k_mask", "int k (a Tensor k: not yet); padding never selected"),
        ("top_p_mask", S, "dt.top_p_mask", "padding never selected"),
        ("repeat", S, "dt.repeat", "its out dim's lengths are read from the device"),
        ("limit_repeats", S, "dt.limit_repeats", ""),
        ("expand_make_non_empty", S, "dt.expand_make_non_empty", ""),
        ("real_as_complex", S, "dt.real_as_complex", "pair_dim anywhere (moved innermost, contiguous)"),
        ("complex_as_real", S, "dt.complex_as_real", ""),
        ("make_complex", S, "dt.make_complex", "real and imag aligned by dims"),
    ],
    "assert_": [("assert_", S, "dt.assert_", "torch._assert_async: no wait for the device (stop=False reads it)")],
    "attention": [
        ("dot_attention", S, "dt.dot_attention", "plus training= (dropout only when True); one SDPA call"),
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
        ("relative_positional_encoding", S, "dt.relative_positional_encoding", ""),
        ("sinusoidal_positional_encoding", S, "dt.sinusoidal_positional_encoding",
         "spatial_dim=None is rf's single_step_dim"),
        ("sinusoidal_encoding", S, "dt.sinusoidal_encoding", ""),
    ],
    "backend": [(n, NA, None, EAGER) for n in (
        "select_backend", "get_selected_backend", "select_backend_numpy", "select_backend_tf",
        "select_backend_returnn_layers_tf", "select_backend_torch", "is_executing_eagerly",
        "is_backend_raw_tensor_dim_tag_independent")],
    "build_from_dict": [(n, NA, None, "RETURNN config dicts; dimtorch modules are built in Python")
                        for n in ("build_from_dict", "build_dict")],
    "cond": [("cond", S, "dt.cond", "a Tensor pred is read from the device (the branch depends on data)")],
    "const": [
        ("full", S, "dt.full", ""), ("fill", ALT, "dt.full", ""), ("constant", ALT, "dt.full", ""),
        ("zeros", S, "dt.zeros", ""), ("ones", S, "dt.ones", ""), ("zeros_like", S, "dt.zeros_like", ""),
        ("ones_like", S, "dt.ones_like", ""),
    ],
    "container": [
        ("ModuleList", S, "dt.nn.ModuleList", "list- and dict-like (names, slices, items())"),
        ("Sequential", S, "dt.nn.Sequential", "a torch.nn.Sequential built and called as rf's: from a generator "
         "or dict, kwargs to every module, collected_outputs="),
        ("sequential", S, "dt.nn.sequential", ""),
        ("ParameterList", S, "dt.nn.ParameterList", "of dt.nn.Parameter; indexing gives Tensors"),
    ],
    "control_flow_ctx": [(n, NA, None, EAGER) for n in ("control_flow_ctx", "get_current_control_flow_ctx")],
    "conv": [
        ("conv", S, "dt.conv", "filter positional, dilation= (rf: dilation_rate=); padding \"valid\", \"same\" or "
                               "ints; 1-3 spatial dims; out_spatial_dims= checked against the computed dims"),
        ("Conv1d", S, "dt.nn.Conv1d", "out_dim may be in_dim"), ("Conv2d", S, "dt.nn.Conv2d", ""),
        ("Conv3d", S, "dt.nn.Conv3d", ""),
        ("transposed_conv", S, "dt.transposed_conv", "out_spatial_dims= checked against the computed dims"),
        ("TransposedConv1d", S, "dt.nn.TransposedConv1d", ""), ("TransposedConv2d", S, "dt.nn.TransposedConv2d", ""),
        ("TransposedConv3d", S, "dt.nn.TransposedConv3d", ""),
        ("pool", S, "dt.pool", "avg with padding=\"same\" or ints averages each sequence's own frames (see "
                               "Differences); dilation_rate=, nd=, use_mask=: not yet"),
        ("max_pool", ALT, "dt.pool", "mode=\"max\""), ("max_pool1d", ALT, "dt.pool", "mode=\"max\""),
        ("pool1d", ALT, "dt.pool", "one spatial dim"), ("pool2d", ALT, "dt.pool", "two spatial dims"),
        ("pool3d", ALT, "dt.pool", "three spatial dims"),
        ("make_conv_out_spatial_dims", S, "dt.make_conv_out_spatial_dims", "the very dims dt.conv/dt.pool return"),
        ("calc_conv_out_length", ALT, "dt.make_conv_out_spatial_dims", "dim math on Dims"),
        ("make_transposed_conv_out_spatial_dims", S, "dt.make_transposed_conv_out_spatial_dims", ""),
        ("calc_transposed_conv_out_length", ALT, "dt.make_transposed_conv_out_spatial_dims", "dim math on Dims"),
    ],
    "device": [
        ("copy_to_device", ALT, "dt.Tensor(x.raw.to(device), x.dims)", ""),
        ("get_default_device", NA, None, "torch's default device applies"),
        ("set_default_device", NA, None, "torch's default device applies"),
        ("set_default_device_ctx", NA, None, "torch's default device applies"),
        ("get_default_dim_size_device", NA, None, "lengths always live on the host (DESIGN §1)"),
    ],
    "dims": [
        ("range_over_dim", S, "dt.range_over_dim", ""),
        ("range_over_dim_strided", S, "dt.range_over_dim_strided",
         "stride an int (a device Tensor stride: not taken, dims' lengths are host values)"),
        ("range_over_merged_dims", S, "dt.range_over_merged_dims",
         "the first dim may be dynamic (T * k, the dim merge_dims makes)"),
        ("linspace_over_dim", S, "dt.linspace_over_dim", "per sequence over a dynamic dim, as rf"),
        ("replace_dim", S, "dt.replace_dim", ""),
        ("replace_dim_v2", S, "dt.replace_dim_v2", "frames beyond each sequence's old length are 0 (rf: the "
                                                   "raw padding)"),
        ("set_sparse_dim", ALT, "dt.Tensor(x.raw, x.dims, sparse_dim=)", ""),
        ("dim_match_priority_when_needed", ALT, "a distinct Dim", "dims are identities: a filter names its second "
                                                                  "channel dim by a copy (Conv1d.filter_in_dim)"),
        ("num_elements_of_shape", S, "dt.num_elements_of_shape",
         "from the host lengths; source= (packed storage): not taken"),
        ("masked_fraction_of_shape", S, "dt.masked_fraction_of_shape", ""),
        ("last_frame_position_of_dim", S, "dt.last_frame_position_of_dim", ""),
        ("use_mask_default", NA, None, "dimtorch masks by default (as rf's newest behavior version)"),
    ],
    "dropout": [("dropout", S, "dt.dropout", "training= instead of rf's run-context train flag; axis= broadcast"),
                ("dropout_broadcast_default", NA, None, "no behavior versions")],
    "dtype": [(n, NA, None, "dtypes are arguments (default float32 / int64); torch's default dtype applies")
              for n in ("get_default_float_dtype", "set_default_float_dtype", "set_default_float_dtype_ctx",
                        "get_default_int_dtype", "get_default_array_index_dtype", "is_float_dtype")],
    "gradient": [
        ("set_requires_gradient", ALT, "x.raw.requires_grad_()", ""),
        ("gradient", ALT, "torch.autograd.grad on raws", ""),
        ("stop_gradient", ALT, "dt.Tensor(x.raw.detach(), x.dims)", ""),
        ("stop_gradient_scope", ALT, "torch.no_grad()", ""),
        ("scaled_gradient", S, "dt.scaled_gradient", "scale 0: the gradient stopped, as rf"),
        ("scaled_gradient_ext", S, "dt.scaled_gradient_ext", "the sum over scale_shift_by_sum_over_axis leaves out "
         "padding frames (rf sums them too: batch-dependent)"),
        ("gradient_checkpoint_scope", ALT, "torch.utils.checkpoint", "works on dimtorch modules"),
    ],
    "graph": [(n, NA, None, "graph introspection of RETURNN's layers backend")
              for n in ("get_tensor_dependencies", "get_tensor_consumers", "walk_tensor_consumers")],
    "label_smoothing": [
        ("label_smoothing", S, "dt.label_smoothing", "probabilities, or int labels via smooth_one_hot"),
        ("smooth_one_hot", S, "dt.smooth_one_hot", "a label out of range gives the other value everywhere"),
        ("label_smoothed_log_prob_gradient", S, "dt.label_smoothed_log_prob_gradient", ""),
    ],
    "linear": [("Linear", S, "dt.nn.Linear", "weight (out, in): torch's layout"), ("Embedding", S, "dt.nn.Embedding", "")],
    "loop": [
        ("while_loop", S, "dt.while_loop", "a Tensor cond is read from the device once per iteration"),
        ("scan", S, "dt.scan", "eager, as rf's torch backend; return_tensor_arrays gives lists of steps"),
    ],
    "loss": [
        ("cross_entropy", S, "dt.cross_entropy", ""),
        ("ctc_loss", S, "dt.ctc_loss", "F.ctc_loss; rf's max_approx/use_native_op/label_loop options: not yet"),
        ("ctc_best_path", S, "dt.ctc_best_path", "Viterbi in torch ops, one step per frame of the raw time size and "
         "back (no device read; RETURNN uses a native op; torch scans under torch.compile/export: one graph for "
         "every length); a sequence without a path gets blank on every frame"),
        ("ctc_greedy_decode", S, "dt.ctc_greedy_decode", "the decoded lengths are read from the device"),
        ("ctc_durations_from_path", S, "dt.ctc_durations_from_path", "without targets_spatial_dim the label counts "
         "are read on the host (as in rf); the check is a device-side assert (with stop_on_failed_check=False, none)"),
        ("ctc_no_label_loop_blank_durations_from_path", S, "dt.ctc_no_label_loop_blank_durations_from_path",
         "as ctc_durations_from_path"),
        ("edit_distance", S, "dt.edit_distance", "no device reads"),
    ],
    "math_": [
        ("compare", S, "dt.compare", ""), ("compare_bc", ALT, "dt.compare", "allow_broadcast_all_sources=True"),
        ("combine", S, "dt.combine", ""), ("combine_bc", ALT, "dt.combine", "allow_broadcast_all_sources=True"),
        *[(n, ALT, f"x {op} y", "operators") for n, op in (
            ("equal", "=="), ("not_equal", "!="), ("less", "<"), ("less_equal", "<="), ("greater", ">"),
            ("greater_equal", ">="), ("add", "+"), ("sub", "-"), ("mul", "*"), ("true_divide", "/"),
            ("floor_divide", "//"), ("mod", "%"), ("pow", "**"))],
        ("ceil_divide", ALT, "-(-x // y)", ""),
        ("neg", S, "dt.neg", ""), ("reciprocal", ALT, "1.0 / x", ""),
        ("squared_difference", S, "dt.squared_difference", ""),
        ("logical_and", S, "dt.logical_and", ""), ("logical_or", S, "dt.logical_or", ""),
        ("logical_not", S, "dt.logical_not", ""),
        ("opt_logical_or", ALT, "Python or", "for Python bools"), ("opt_logical_and", ALT, "Python and", "for Python bools"),
        ("log_add_exp", S, "dt.log_add_exp", ""),
        ("is_finite", S, "dt.is_finite", ""),
        ("is_infinite", S, "dt.is_infinite", ""),
        ("is_neg_infinite", S, "dt.is_neg_infinite", ""),
        ("maximum", S, "dt.maximum", ""), ("minimum", S, "dt.minimum", ""),
        ("clip_by_value", ALT, "dt.clip", ""), ("identity", ALT, "x", ""),
        ("exp", S, "dt.exp", ""), ("expm1", S, "dt.expm1", ""),
        ("log", S, "dt.log", ""), ("safe_log", S, "dt.safe_log", ""), ("log1p", S, "dt.log1p", ""),
        ("sqrt", S, "dt.sqrt", ""), ("rsqrt", S, "dt.rsqrt", ""), ("square", S, "dt.square", ""),
        ("abs", S, "dt.abs", ""), ("tanh", S, "dt.tanh", ""), ("sigmoid", S, "dt.sigmoid", ""),
        ("log_sigmoid", S, "dt.log_sigmoid", ""), ("sin", S, "dt.sin", ""), ("cos", S, "dt.cos", ""),
        ("ceil", S, "dt.ceil", ""), ("floor", S, "dt.floor", ""), ("round", S, "dt.round", ""),
        ("relu", S, "dt.relu", ""), ("relu_square", ALT, "dt.square(dt.relu(x))", ""),
        ("elu", S, "dt.elu", ""), ("selu", S, "dt.selu", ""),
        ("silu", S, "dt.silu", ""), ("swish", ALT, "dt.silu", ""), ("gelu", S, "dt.gelu", ""),
        ("softmax", S, "dt.softmax", ""), ("log_softmax", S, "dt.log_softmax", ""),
        ("gating", S, "dt.gating", ""),
        ("lerp", S, "dt.lerp", "torch.lerp where the dtypes allow it"),
        ("cumsum", S, "dt.cumsum", "axis= (rf: spatial_dim=)"),
    ],
    "matmul": [("matmul", S, "dt.matmul", ""), ("dot", S, "dt.dot", "")],
    "normalization": [
        ("moments", S, "dt.moments", ""), ("LayerNorm", S, "dt.nn.LayerNorm", ""), ("RMSNorm", S, "dt.nn.RMSNorm", ""),
        ("GroupNorm", S, "dt.nn.GroupNorm", "rf's per-frame form (statistics over each group's channels only)"),
        ("GroupNormSpatial", S, "dt.nn.GroupNormSpatial", "statistics over valid frames only (batch independent)"),
        ("BatchNorm", S, "dt.nn.BatchNorm", "affine=; parameters scale/bias, buffers running_mean/running_var "
                                            "(rf: gamma/beta, running_variance)"),
        ("batch_norm_distributed_default", NA, None, "no RETURNN config"),
        ("normalize", S, "dt.normalize", "valid frames only; a's padding zeroed first when axis has a dynamic dim"),
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
    "piecewise_linear": [("PiecewiseLinear", NA, None, "schedules: torch's LR schedulers")],
    "rand": [
        ("set_random_seed", ALT, "torch.manual_seed", ""),
        ("get_random_state", ALT, "torch.get_rng_state", ""), ("set_random_state", ALT, "torch.set_rng_state", ""),
        ("reset_step_random_state", NA, None, CTX), ("get_static_step_based_seed", NA, None, CTX),
        ("random", ALT, "dt.random_uniform", "and dt.random_normal"),
        ("random_uniform", S, "dt.random_uniform", ""), ("random_normal", S, "dt.random_normal", ""),
        ("random_truncated_normal", S, "dt.random_truncated_normal", "seed=/generator= as dt.random_normal; no "
         "explicit_state"),
        ("random_choice_without_replacement", S, "dt.random_choice_without_replacement", "Gumbel top-k"),
        ("random_choice_with_replacement", S, "dt.random_choice_with_replacement", "torch.multinomial; padding never "
         "drawn"),
    ],
    "rec": [("LSTM", S, "dt.nn.LSTM", "torch's kernel; layers and bidirectional"), ("LstmState", S, "dt.nn.LstmState", ""),
            ("ZoneoutLSTM", S, "dt.nn.ZoneoutLSTM",
             "rf's parameters (ff_weight, rec_weight, bias) and options; a per-frame Python loop (one torch scan "
             "under torch.compile/export: one graph for every length); state=None means "
             "zeros; spatial_dim=None is one step; training follows torch's module.training (rf: the run "
             "context's train flag)")],
    "reduce": [
        ("reduce", ALT, "dt.reduce_sum", "one function per mode"),
        *[(n, S, f"dt.{n}", "") for n in ("reduce_sum", "reduce_max", "reduce_min", "reduce_mean", "reduce_logsumexp",
                                          "reduce_any", "reduce_all", "reduce_argmin", "reduce_argmax")],
        ("reduce_logmeanexp", S, "dt.reduce_logmeanexp", "reduce_logsumexp minus the log of each sequence's "
         "frame count (cached lengths); an empty sequence gives -inf"),
        ("reduce_out", S, "dt.reduce_out", "modes max, sum, mean, min"),
        ("RunningMean", S, "dt.nn.RunningMean", "a buffer (no gradient, in the state dict); valid frames only"),
        ("top_k", S, "dt.top_k", ""),
    ],
    "run_ctx": [(n, NA, None, CTX) for n in ("RunCtx", "Loss", "get_run_ctx", "get_run_ctx_step",
                                             "init_train_step_run_ctx", "init_forward_step_run_ctx")],
    "signal": [("stft", S, "dt.stft", "frames per sequence by dim math; window_use_frame_length=False counts "
                                      "frames of fft_length (rf counts frame_length)")],
    "static_traceable": [(n, NA, None, "RETURNN's static tracing; dimtorch's compile support: issue 12")
                         for n in ("is_static_traceable", "set_static_traceable", "set_static_traceable_ctx",
                                   "static_traceable_generation")],
    "stepwise_scheduler": [("PiecewiseLinearStepwiseScheduler", NA, None, "schedules: torch's LR schedulers")],
    "tensor_layout": [(n, NA, None, "layouts are the raws' dims orders") for n in ("TensorLayout", "get_tensor_layout")],
    "types": [("Tensor", S, "dt.Tensor", ""), ("Dim", S, "dt.Dim", "identity equality; dim math"),
              *[(n, NA, None, "typing aliases of RETURNN") for n in ("RawTensorTypes", "ItemKeyType", "GetModelFunc",
                                                                      "StepFunc", "get_raw_tensor_type")]],
    "audio.mel": [("mel_filterbank", S, "dt.audio.mel_filterbank", ""),
                  ("log_mel_filterbank_from_raw", S, "dt.audio.log_mel_filterbank_from_raw", "")],
    "audio.specaugment": [
        ("specaugment", S, "dt.audio.specaugment", "no run context: step= and training= are arguments; "
                                                  "generator=; count range per sequence (rf's newest); no device read"),
        ("random_mask", S, "dt.audio.random_mask", "counts drawn and gated on the device, slots a host bound "
                                                  "(rf's static-traceable form; its eager form reads the counts' max)"),
        ("mask", S, "dt.audio.mask", "generator="),
    ],
    "init": [
        ("ParamInit", ALT, "dt.nn.init.Initializer", ""), ("ParamInitType", ALT, "dt.nn.init.Initializer", ""),
        *[(n, S, f"dt.nn.init.{n}", "") for n in ("Normal", "VarianceScaling", "Glorot", "He", "HeNormal",
                                                 "HeUniform")],
    ],
    "nested": [
        ("mask_nested", S, "dt.mask_nested", "top-level in dimtorch; merging two different dims: not yet"),
        ("gather_nested", S, "dt.gather_nested", "top-level in dimtorch; a dim with lengths over the gathered dim "
                                                  "gets gathered lengths (a device read of the indices)"),
        ("where_nested", S, "dt.where_nested", "top-level in dimtorch; merging two different dims: not yet"),
        ("masked_select_nested", S, "dt.masked_select_nested", "top-level in dimtorch"),
        ("masked_scatter_nested", S, "dt.masked_scatter_nested", "top-level in dimtorch"),
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
    "conversions.torch_nn": [(n, ALT, "load_state_dict", "dimtorch modules hold torch's parameter layouts")
                             for n in ("import_params_torch_linear_to_rf", "import_params_torch_conv1d_to_rf",
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
    import dimtorch as dt
    obj = dt
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


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
            if status in (S, ALT) and counterpart and re.fullmatch(r"dt(\.\w+)+", counterpart) \
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
        "Status: **same** = dimtorch has it under rf's name (keyword names as rf's unless the note says); "
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

"""dimtorch::ctc_loss, CTC as one opaque op for graphs: torch's own has no fake kernel and a data-dependent output shape.

torch 2.13's aten::_ctc_loss.Tensor (what F.ctc_loss calls with length tensors) returns, besides the
per-sequence loss, log_alpha of shape (B, T, 2 * max(target_lengths) + 1): a size read from the
lengths, so torch.compile breaks the graph there and fake tensors have no kernel for it. This op
returns the loss alone, whose shape (B,) follows from the inputs', and recomputes log_alpha in its
backward: the traced graph holds one node per direction, and the eager kernels run inside them.
"""
from __future__ import annotations

import torch

_NAMESPACE = "dimtorch"


@torch.library.custom_op(f"{_NAMESPACE}::ctc_loss", mutates_args=())
def ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
             target_lengths: torch.Tensor, blank: int, zero_infinity: bool) -> torch.Tensor:
    """Per-sequence CTC loss (reduction none) of log_probs (T, B, C), targets (B, S), int lengths (B,)."""
    return torch.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, 0, zero_infinity)


@ctc_loss.register_fake
def _(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    return log_probs.new_empty((log_probs.shape[1],))


@torch.library.custom_op(f"{_NAMESPACE}::ctc_loss_backward", mutates_args=())
def ctc_loss_backward(grad: torch.Tensor, log_probs: torch.Tensor, targets: torch.Tensor,
                      input_lengths: torch.Tensor, target_lengths: torch.Tensor, blank: int,
                      zero_infinity: bool) -> torch.Tensor:
    """The gradient of ctc_loss with respect to log_probs, for the loss's gradient `grad` (B,)."""
    nll, log_alpha = torch.ops.aten._ctc_loss.Tensor(log_probs, targets, input_lengths, target_lengths, blank,
                                                      zero_infinity)
    # contiguous whatever the layout of log_probs (the fake kernel below says so)
    return torch.ops.aten._ctc_loss_backward.Tensor(grad, log_probs, targets, input_lengths, target_lengths, nll,
                                                     log_alpha, blank, zero_infinity).contiguous()


@ctc_loss_backward.register_fake
def _(grad, log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    return log_probs.new_empty(log_probs.shape)


def _setup_context(ctx, inputs, output):
    log_probs, targets, input_lengths, target_lengths, blank, zero_infinity = inputs
    ctx.save_for_backward(log_probs, targets, input_lengths, target_lengths)
    ctx.blank, ctx.zero_infinity = blank, zero_infinity


def _backward(ctx, grad):
    log_probs, targets, input_lengths, target_lengths = ctx.saved_tensors
    grad_lp = ctc_loss_backward(grad.contiguous(), log_probs, targets, input_lengths, target_lengths, ctx.blank,
                                ctx.zero_infinity)
    return grad_lp, None, None, None, None, None


ctc_loss.register_autograd(_backward, setup_context=_setup_context)

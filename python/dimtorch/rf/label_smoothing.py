"""rf.label_smoothing: dimtorch's ops themselves."""
import dimtorch as _dt

__all__ = ["label_smoothing", "smooth_one_hot", "label_smoothed_log_prob_gradient"]

label_smoothing = _dt.label_smoothing
smooth_one_hot = _dt.smooth_one_hot
label_smoothed_log_prob_gradient = _dt.label_smoothed_log_prob_gradient

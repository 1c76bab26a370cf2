"""rf.loss: RETURNN frontend's losses and CTC decoding, dimtorch's ops themselves."""
import dimtorch as _dt

__all__ = ["cross_entropy", "ctc_loss", "ctc_best_path", "ctc_greedy_decode", "ctc_durations_from_path",
           "ctc_no_label_loop_blank_durations_from_path", "edit_distance"]

cross_entropy = _dt.cross_entropy
ctc_loss = _dt.ctc_loss
ctc_best_path = _dt.ctc_best_path
ctc_greedy_decode = _dt.ctc_greedy_decode
ctc_durations_from_path = _dt.ctc_durations_from_path
ctc_no_label_loop_blank_durations_from_path = _dt.ctc_no_label_loop_blank_durations_from_path
edit_distance = _dt.edit_distance

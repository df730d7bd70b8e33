"""What a draft is worth: the forward-cost curve, the draft policy that sizes a tree against it
(its node estimates calibrated on what was accepted), and the gate that skips a look that does
not pay."""

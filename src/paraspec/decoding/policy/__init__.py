"""What a draft is worth: the forward-cost curve, the draft policy that sizes a tree against it,
and the gate that skips a look that does not pay."""

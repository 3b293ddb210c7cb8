"""Inverse physics (paper 000 §5): the muscle activations and jaw pose behind each shape key."""

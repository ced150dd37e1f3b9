"""Co-location datasets.

Gavel, Lucid and cluster traces, and a synthetic generator with a known ground truth. This
layer is being built (the data issue).
"""

"""Co-location datasets (Gavel, Lucid, traces) and a synthetic generator with known ground truth. Not yet implemented: see the project's data issue.

This layer holds no code yet; importing it is safe and does nothing.
"""

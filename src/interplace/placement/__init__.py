"""Placement policies and Bayesian optimisation of allocations. Not yet implemented: a later issue.

This layer holds no code yet; importing it is safe and does nothing.
"""

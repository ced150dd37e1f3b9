"""Placement policies and Bayesian optimisation of allocations.

Not yet implemented (a later issue); importing this package is safe and does nothing.
"""

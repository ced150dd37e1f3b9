"""The Pyro Bayesian interference model.

Not yet implemented (the model issue); importing this package is safe and does nothing.
"""

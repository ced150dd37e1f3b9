"""The Pyro Bayesian interference model. Not yet implemented: see the project's model issue.

This layer holds no code yet; importing it is safe and does nothing.
"""

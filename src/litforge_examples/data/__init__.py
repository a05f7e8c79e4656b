"""LightningDataModules, one per file. Every dataset ships with an installed package
(scikit-learn's digits, the standard library's text).
"""

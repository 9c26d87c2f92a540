"""The real paged KV cache and kernels over kvsim's block tables, a timing harness, and the calibration fit.

This is the only package that imports torch (the optional ``gpu`` extra).
"""

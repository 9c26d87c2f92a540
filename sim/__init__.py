"""kvsim's engine: scheduler model, step-cost model, SimPy event loop, metrics and the command line."""

"""The simulation kernel: scheduler, allocator door, decode fast-forward, engine, fleet, cost model, runner."""

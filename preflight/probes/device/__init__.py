"""The device probes: every rank measures its own device, rank 0 judges them all (docs/probes.md).

run (measure on every rank, lead on rank 0), family (the figures and their timing), boundary
(the one device boundary: torch on CPU or the bound GPU, NVML), store (the reports' traffic),
judge (siblings, peaks, digests, clocks), hardware (the one hardware table).
"""

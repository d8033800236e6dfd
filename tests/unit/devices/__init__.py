"""Unit tests of the GPU providers and the TFLOPS lookup."""

"""Counters, gauges and histograms, and their Prometheus text."""

"""The collector process: lifecycle, detection wiring and alert delivery."""

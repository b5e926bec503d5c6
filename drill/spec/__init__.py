"""Drill, scenario and plugin-parameter files: YAML to typed, validated, frozen models."""

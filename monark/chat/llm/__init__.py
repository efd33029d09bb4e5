"""The model provider layer: neutral types, the providers, and one adapter per SDK (each the
only module importing it, when first built)."""

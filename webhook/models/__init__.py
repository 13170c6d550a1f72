"""What a model is and weighs: the catalog, the models file parser and the VRAM arithmetic."""

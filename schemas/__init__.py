"""The preprocessed-corpus artifact format (see FORMAT.md): schemas, version checks, an artifact reader."""

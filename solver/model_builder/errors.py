class ModelBuildError(RuntimeError):
    """The rig cannot be turned into a model; the message says what is missing and how to fix it."""

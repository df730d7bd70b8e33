"""Errors a user can cause. Each message is one line that says what is wrong and how to fix it."""


class ParaspecError(ValueError):
    """Base of every user-caused error (bad model file, config, request or sampling value).

    `param` names the field at fault where there is one (e.g. "temperature"), so the server can
    report it as OpenAI's `param` without reading it out of the message."""

    def __init__(self, message: str = "", *, param: str | None = None):
        super().__init__(message)
        self.param = param


class ModelLoadError(ParaspecError):
    """The model file or folder is missing, corrupt or of an unsupported kind."""


class ConfigError(ParaspecError):
    """An invalid engine, plugin or server configuration value."""


class SamplingParamsError(ParaspecError):
    """An invalid sampling value (temperature, top_p, penalties, ...)."""


class RequestError(ParaspecError):
    """A request the engine cannot serve as given (prompt too long, empty prompt, ...)."""

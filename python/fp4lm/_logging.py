"""The engine logs through Python's logging, logger "fp4lm" (the CLI's lines, same text).

Like vLLM (VLLM_CONFIGURE_LOGGING), fp4lm gives that logger a stderr handler at INFO unless
FP4LM_CONFIGURE_LOGGING=0; records still propagate to the root logger's handlers, so
pytest's caplog and an application's own logging configuration see them.
"""
import logging
import os

LOGGER_NAME = "fp4lm"


class _DefaultHandler(logging.StreamHandler):
    """Prints only when the application configured no root handler (no duplicate lines)."""

    def emit(self, record):
        if logging.getLogger().handlers:
            return
        super().emit(record)


def configure():
    logger = logging.getLogger(LOGGER_NAME)
    if os.environ.get("FP4LM_CONFIGURE_LOGGING", "1") == "0":
        return
    if not any(isinstance(h, _DefaultHandler) for h in logger.handlers):
        handler = _DefaultHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s %(message)s", "%m-%d %H:%M:%S"))
        logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)

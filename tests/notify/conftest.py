from __future__ import annotations

import pytest
from loguru import logger

from tests.notify.receiver import Receiver


@pytest.fixture
def receiver():
    made = []

    def make(script=(), then=200, port=0):
        r = Receiver(script, then, port)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


@pytest.fixture
def logs():
    lines: list[str] = []
    hid = logger.add(lambda m: lines.append(str(m)), level="DEBUG", serialize=True)
    yield lines
    logger.remove(hid)

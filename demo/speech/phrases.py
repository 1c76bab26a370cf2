"""English phrases for the speech task: numbers, digit strings, times, dates and simple commands, as the
words a speaker says ("set an alarm for seven forty five"), lower case a-z, space and apostrophe only.

`draw_phrase(rng)` draws one phrase from a numpy Generator; `VOCABULARY` is every word the generator can
produce (tested) and `ALPHABET` the characters of the CTC targets.
"""
from __future__ import annotations

from typing import Callable, List, Sequence

import numpy as np

ALPHABET = "abcdefghijklmnopqrstuvwxyz '"  # CTC labels 0..27; blank is 28

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
TEENS = ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"]
ORDINALS = ["", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
            "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth",
            "nineteenth", "twentieth"]


def number_words(n: int) -> List[str]:
    """0 <= n < 10000 in words ("four hundred twelve", "two thousand five")."""
    if n < 10:
        return [ONES[n]]
    if n < 20:
        return [TEENS[n - 10]]
    if n < 100:
        return [TENS[n // 10]] + (number_words(n % 10) if n % 10 else [])
    if n < 1000:
        return [ONES[n // 100], "hundred"] + (number_words(n % 100) if n % 100 else [])
    return number_words(n // 1000) + ["thousand"] + (number_words(n % 1000) if n % 1000 else [])


def ordinal_words(n: int) -> List[str]:
    """1 <= n <= 31 as an ordinal ("twenty third")."""
    if n <= 20:
        return [ORDINALS[n]]
    if n == 30:
        return ["thirtieth"]
    return [TENS[n // 10]] + [ORDINALS[n % 10]]


def _time(rng) -> List[str]:
    hour, minute = int(rng.integers(1, 13)), int(rng.integers(0, 60))
    kind = rng.integers(0, 4)
    if kind == 0 or minute == 0:
        return number_words(hour) + ["o'clock"]
    if kind == 1:
        return ["half", "past"] + number_words(hour) if minute < 30 else ["quarter", "to"] + number_words(hour)
    if minute < 10:
        return number_words(hour) + ["oh"] + number_words(minute)
    return number_words(hour) + number_words(minute)


def _date(rng) -> List[str]:
    month, day = MONTHS[int(rng.integers(0, 12))], ordinal_words(int(rng.integers(1, 32)))
    return [month] + day if rng.random() < 0.5 else ["the"] + day + ["of", month]


def _digits(rng, low: int = 3, high: int = 7) -> List[str]:
    return [("oh" if d == 0 and rng.random() < 0.3 else ONES[d]) for d in rng.integers(0, 10, int(rng.integers(low, high)))]


def _number(rng) -> List[str]:
    return number_words(int(rng.choice([rng.integers(0, 100), rng.integers(100, 1000), rng.integers(1000, 10000)])))


def _command(rng) -> List[str]:
    kind = int(rng.integers(0, 9))
    if kind == 0:
        return ["set", "an", "alarm", "for"] + _time(rng)
    if kind == 1:
        unit = ["seconds", "minutes", "hours"][int(rng.integers(0, 3))]
        return ["set", "a", "timer", "for"] + number_words(int(rng.integers(2, 60))) + [unit]
    if kind == 2:
        return ["call"] + _digits(rng, 3, 8)
    if kind == 3:
        return ["turn", ["on", "off"][int(rng.integers(0, 2))], "the", ["lights", "radio", "heating"][int(rng.integers(0, 3))]]
    if kind == 4:
        return ["turn", "the", "volume", ["up", "down"][int(rng.integers(0, 2))]]
    if kind == 5:
        return ["play", "track"] + number_words(int(rng.integers(1, 100)))
    if kind == 6:
        return ["remind", "me", "on"] + _date(rng)
    if kind == 7:
        return [["stop", "cancel", "pause", "resume"][int(rng.integers(0, 4))], "the",
                ["alarm", "timer", "music"][int(rng.integers(0, 3))]]
    return ["what", "time", "is", "it"]


_KINDS: Sequence[Callable] = (_digits, _number, _time, _date, _command, _command)


def draw_phrase(rng: np.random.Generator) -> str:
    """One phrase: a digit string, a number, a time, a date or a command (commands twice as often)."""
    return " ".join(_KINDS[int(rng.integers(0, len(_KINDS)))](rng))


def _all_words() -> frozenset:
    words = set(ONES + TEENS + TENS[2:] + MONTHS + ORDINALS[1:] + ["thirtieth", "hundred", "thousand", "oh"])
    words |= {"o'clock", "half", "past", "quarter", "to", "the", "of", "set", "an", "alarm", "for", "a", "timer",
              "seconds", "minutes", "hours", "call", "turn", "on", "off", "lights", "radio", "heating", "volume", "up",
              "down", "play", "track", "remind", "me", "stop", "cancel", "pause", "resume", "music", "what", "time",
              "is", "it"}
    return frozenset(words)


VOCABULARY = _all_words()


def text_to_labels(text: str) -> List[int]:
    """Character labels of `text` (lower case a-z, space, apostrophe); ValueError naming any other character."""
    bad = sorted(set(text) - set(ALPHABET))
    if bad:
        raise ValueError(f"demo.speech.text_to_labels(): characters {bad} are not in the alphabet {ALPHABET!r}")
    return [ALPHABET.index(c) for c in text]


def labels_to_text(labels: Sequence[int]) -> str:
    return "".join(ALPHABET[i] for i in labels if 0 <= i < len(ALPHABET))


__all__ = ["ALPHABET", "VOCABULARY", "draw_phrase", "number_words", "ordinal_words", "text_to_labels",
           "labels_to_text"]

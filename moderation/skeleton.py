"""The form text is matched in: what a reader sees, with the tricks that hide a word from a filter
undone, so a listed term written with zero-width characters, bidi controls, combining marks,
full-width forms or look-alike letters from other scripts is still the listed term.

Steps, in order (`skeleton`):
1. NFKC: compatibility forms to their plain letters (full-width `ｆｏｒ`, mathematical bold, ligatures).
2. Drop what shows nothing: format characters (Unicode category Cf: zero-width space and joiners,
   word joiner, BOM, soft hyphen, the bidi marks, embeddings, overrides and isolates), other
   control characters but white space, and the blank letters of INVISIBLE (Hangul fillers, braille
   blank).
3. NFKD, then drop the combining marks (categories Mn, Me: accents, variation selectors, the
   stacked marks of "zalgo" text); spacing marks (Mc) stay, they are part of letters in Indic
   scripts.
4. Look-alikes to Latin (CONFUSABLES), case-fold, look-alikes again (case-folding can make new
   ones): a small table after the idea of Unicode's confusables data (UTS #39 "skeleton"), limited
   to the Cyrillic and Greek letters that pass for Latin ones and a few Latin variants. Digits are
   not mapped ("0" for "o"): numbers in prompts would become words.

Words are then runs of letters and digits; anything else (space, hyphen, underscore, punctuation)
separates them, so `forbidden-content`, `forbidden content` and `forbidden_content` are one phrase.
Real Cyrillic or Greek words may map onto a listed Latin word; that errs towards a person looking.
Out of scope: letters spaced apart ("f o r"), digits for letters, words split by a line break.

The work is linear in the text (each step is one pass; NFKC grows a text at most 18-fold), and a
caller bounds the text's length first (text_policy.MAX_TEXT_CHARS).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Letters that are blank though not in category Cf: Hangul fillers, halfwidth filler, braille blank.
INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u2800")

# Look-alike -> Latin, lower case. Cyrillic and Greek capitals are listed too: case-folding would
# turn them into letters that no longer look Latin (Cyrillic В -> в).
CONFUSABLES = str.maketrans({
    # Cyrillic (accented ones, ё ї й, are bare by then: step 3)
    "а": "a", "е": "e", "к": "k", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "ѕ": "s",
    "і": "i", "ј": "j", "һ": "h", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ӏ": "l",
    "А": "a", "В": "b", "Е": "e", "К": "k", "М": "m", "Н": "h", "О": "o", "Р": "p", "С": "c",
    "Т": "t", "У": "y", "Х": "x", "Ѕ": "s", "І": "i", "Ј": "j", "Ӏ": "l",
    # Greek
    "α": "a", "β": "b", "γ": "y", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "υ": "u", "χ": "x",
    "Α": "a", "Β": "b", "Ε": "e", "Ζ": "z", "Η": "h", "Ι": "i", "Κ": "k", "Μ": "m", "Ν": "n",
    "Ο": "o", "Ρ": "p", "Τ": "t", "Υ": "y", "Χ": "x",
    # Latin variants NFKC keeps
    "ı": "i", "ȷ": "j", "ɑ": "a", "ɡ": "g", "ɩ": "i", "ʋ": "u", "ǀ": "l",
})

_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script


@dataclass(frozen=True)
class Skeleton:
    """A text's words in the matching form, and how many characters were dropped as invisible."""

    words: tuple[str, ...]
    invisible: int  # format, control and blank characters removed (step 2)
    length: int  # characters in the text as given


def _shows(c: str) -> bool:
    category = unicodedata.category(c)
    if category == "Cf" or c in INVISIBLE:
        return False
    return category != "Cc" or c.isspace()


def skeleton(text: str) -> Skeleton:
    """`text` in the matching form (see the module's docstring), split into words."""
    composed = unicodedata.normalize("NFKC", text)
    visible = "".join(c for c in composed if _shows(c))
    bare = "".join(c for c in unicodedata.normalize("NFKD", visible) if unicodedata.category(c) not in ("Mn", "Me"))
    folded = bare.translate(CONFUSABLES).casefold().translate(CONFUSABLES)
    return Skeleton(words=tuple(_WORD.findall(folded)), invisible=len(composed) - len(visible), length=len(text))


def words_of(term: str) -> tuple[str, ...]:
    """A listed term's words in the same form (a term is matched as that sequence of whole words)."""
    return skeleton(term).words

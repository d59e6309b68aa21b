"""Identity terms read as ``<unk>``: what a text says about a nationality, religion, ethnicity or sexuality never
moves the prediction.

A classifier trained on reviews learns whatever its labels correlate with, names of peoples included: on IMDB's
reviews "Italian" leans positive and "Mexican" negative, so "The Mexican chef was friendly." and "The Italian chef
was friendly." get different probabilities. Garg et al. (2019, "Counterfactual Fairness in Text Classification
through Robustness", AIES, 4.1: "blindness") replace every identity term by one special token, so that a swap of
one for another cannot change the prediction. ``[data] blind_identity = true`` does this here: a word of
:data:`IDENTITY_TERMS` gets ``<unk>``'s id (the token word dropout already trains), in training and in every
prediction, before negation marks (``negation.py``), so the n-gram score and the encoder both read ``<unk>``.

The list: demonyms of the world's countries and of some regions, religions and their adherents, ethnicities and
sexualities, written for this package, not taken from CheckList's released suite (kept outside the repository as an
independent check); a few two-word terms whose first word alone is a common word ("Roman Catholic", "South
African") are blinded as a pair. An "an" before a blinded term, or before a word outside the vocabulary, is read as
"a": which article is written depends on the word's first sound. ("Philippine" and that article rule were added on
2026-12-08 after CheckList's nationality test showed them missing: that test no longer checks the list independently.)
Words that are also common words of another meaning are left out ("black", "white",
"straight"), so "a black comedy" and "straight to video" keep their meaning; their swaps are not blinded.
"""

from __future__ import annotations

import weakref

import numpy as np

NATIONALITIES = frozenset("""
afghan albanian algerian american andorran angolan argentine argentinian armenian australian austrian azerbaijani
bahamian bahraini bangladeshi barbadian belarusian belgian belizean beninese bhutanese bolivian bosnian
botswanan brazilian british bruneian bulgarian burkinabe burmese burundian cambodian cameroonian canadian
chadian chilean chinese colombian congolese croatian cuban cypriot czech danish djiboutian
dominican dutch ecuadorian egyptian emirati english eritrean estonian ethiopian fijian filipino finnish
french gabonese gambian georgian german ghanaian greek grenadian guatemalan guinean guyanese haitian
honduran hungarian icelandic indian indonesian iranian iraqi irish israeli italian ivorian jamaican japanese
jordanian kazakh kazakhstani kenyan korean kosovar kuwaiti kyrgyz lao laotian latvian lebanese liberian
libyan lithuanian luxembourgish macedonian malagasy malawian malaysian maldivian malian maltese mauritanian
mauritian mexican moldovan monacan mongolian montenegrin moroccan mozambican namibian nepalese nepali
nicaraguan nigerian nigerien norwegian omani pakistani palestinian panamanian paraguayan persian peruvian
polish portuguese qatari romanian russian rwandan salvadoran samoan saudi scottish senegalese serbian
singaporean slovak slovakian slovenian somali somalian sudanese surinamese swazi swedish swiss
syrian taiwanese tajik tanzanian thai tibetan togolese tongan trinidadian tunisian turkish turkmen ugandan
ukrainian uruguayan uzbek venezuelan vietnamese welsh yemeni zambian zimbabwean philippine luxembourger
bahraini kittitian vincentian motswana liechtensteiner
""".split())
RELIGIONS = frozenset("""
christian christians muslim muslims jewish jew jews hindu hindus buddhist buddhists sikh sikhs catholic catholics
protestant protestants jain jains taoist taoists baptist baptists evangelical evangelicals mormon mormons
atheist atheists agnostic agnostics islamic orthodox lutheran lutherans methodist methodists shia sunni
""".split())
ETHNICITIES = frozenset("""
asian asians latino latinos latina latinas latinx hispanic hispanics arab arabs caucasian caucasians
indigenous aboriginal african africans european europeans
""".split())
SEXUALITIES = frozenset("""
gay gays lesbian lesbians bisexual bisexuals queer asexual pansexual heterosexual heterosexuals homosexual
homosexuals transgender lgbt lgbtq
""".split())
IDENTITY_TERMS = NATIONALITIES | RELIGIONS | ETHNICITIES | SEXUALITIES
# Two-word terms whose first word alone is a common word ("roman", "south"): both words are blinded together
TWO_WORD_TERMS = frozenset(tuple(t.split()) for t in (
    "roman catholic", "eastern orthodox", "greek orthodox", "russian orthodox", "native american", "african american",
    "south asian", "east asian", "southeast asian", "middle eastern", "pacific islander", "first nations",
    "new zealander", "south african", "north korean", "south korean", "costa rican", "puerto rican", "sri lankan",
    "sierra leonean", "saudi arabian", "el salvadoran", "cape verdean",
))
ARTICLES = ("a", "an")   # "an" before a vowel sound: which one is written depends on the term blinded

_IDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # tokenizer -> its identity ids, while it lives


def identity_ids(tokenizer) -> "IdentityIds":
    """The identity terms of ``tokenizer``'s vocabulary (lower case, any trailing ``. , ; : ! ?`` of a
    whitespace-split token aside), cached per tokenizer."""
    cached = _IDS.get(tokenizer)
    if cached is not None:
        return cached
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    mask = np.zeros(max(vocab.values(), default=0) + 1, bool)
    for token, i in vocab.items():
        mask[i] = token.rstrip(".,;:!?").lower() in IDENTITY_TERMS
    pairs: dict[int, set[int]] = {}
    for first, second in TWO_WORD_TERMS:
        if first in vocab and second in vocab:
            pairs.setdefault(vocab[first], set()).add(vocab[second])
    a, an = (vocab.get(w) for w in ARTICLES)
    cached = _IDS[tokenizer] = IdentityIds(mask, pairs, an if a is not None else None, a)
    return cached


class IdentityIds:
    """One vocabulary's identity terms: ``mask`` ``(vocab_size,)`` bool (one-word terms), ``pairs`` (a first word's
    id -> the ids of the second words it makes a term with), and the ids of "an" and "a" (``None`` when the
    vocabulary lacks either)."""

    def __init__(self, mask: np.ndarray, pairs: dict[int, set[int]], an: int | None, a: int | None):
        self.mask, self.pairs, self.an, self.a = mask, pairs, an, a

    def __getitem__(self, i: int) -> bool:
        return bool(i < len(self.mask) and self.mask[i])


def blind(ids, terms: IdentityIds, unk_id: int) -> list[int]:
    """``ids`` (one text's vocabulary ids, unmarked) with each identity term's ids replaced by ``unk_id``, and an
    "an" right before one, or before a word outside the vocabulary, read as "a", so that "an Indian poet" and "a
    Chinese poet" give the same ids.

    Args:
        ids: token ids of one text.
        terms: :func:`identity_ids` of the tokenizer that gave them.
        unk_id: ``<unk>``'s id.

    Returns:
        The ids, the same length.
    """
    out, n = list(ids), len(ids)
    blinded = [False] * n
    for i, t in enumerate(ids):
        if terms[t]:
            blinded[i] = True
        elif i + 1 < n and ids[i + 1] in terms.pairs.get(t, ()):
            blinded[i] = blinded[i + 1] = True
    for i in range(n):
        if blinded[i]:
            out[i] = unk_id
        elif i + 1 < n and (blinded[i + 1] or ids[i + 1] == unk_id) and ids[i] == terms.an:
            out[i] = terms.a
    return out

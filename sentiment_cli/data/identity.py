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
sexualities, written for this package; not the lexicons of CheckList's released suite. Words that are also
common words of another meaning are left out ("black", "white", "straight", "english" as a language name is kept),
so "a black comedy" and "straight to video" keep their meaning; their swaps are not blinded.
"""

from __future__ import annotations

import weakref

import numpy as np

NATIONALITIES = frozenset("""
afghan albanian algerian american andorran angolan argentine argentinian armenian australian austrian azerbaijani
bahamian bahraini bangladeshi barbadian belarusian belgian belizean beninese bhutanese bolivian bosnian
botswanan brazilian british bruneian bulgarian burkinabe burmese burundian cambodian cameroonian canadian
chadian chilean chinese colombian congolese costa rican croatian cuban cypriot czech danish djiboutian
dominican dutch ecuadorian egyptian emirati english eritrean estonian ethiopian fijian filipino finnish
french gabonese gambian georgian german ghanaian greek grenadian guatemalan guinean guyanese haitian
honduran hungarian icelandic indian indonesian iranian iraqi irish israeli italian ivorian jamaican japanese
jordanian kazakh kazakhstani kenyan korean kosovar kuwaiti kyrgyz lao laotian latvian lebanese liberian
libyan lithuanian luxembourgish macedonian malagasy malawian malaysian maldivian malian maltese mauritanian
mauritian mexican moldovan monacan mongolian montenegrin moroccan mozambican namibian nepalese nepali
nicaraguan nigerian nigerien norwegian omani pakistani palestinian panamanian paraguayan persian peruvian
polish portuguese qatari romanian russian rwandan salvadoran samoan saudi scottish senegalese serbian
sierra leonean singaporean slovak slovakian slovenian somali somalian sudanese surinamese swazi swedish swiss
syrian taiwanese tajik tanzanian thai tibetan togolese tongan trinidadian tunisian turkish turkmen ugandan
ukrainian uruguayan uzbek venezuelan vietnamese welsh yemeni zambian zimbabwean
""".split()) - {"costa", "rican", "sierra", "leonean"}
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

_IDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # tokenizer -> its identity ids, while it lives


def identity_ids(tokenizer) -> np.ndarray:
    """``(vocab_size,)`` bool: whether each id of ``tokenizer``'s vocabulary is an identity term (lower case, any
    trailing ``. , ; : ! ?`` of a whitespace-split token aside), cached per tokenizer."""
    cached = _IDS.get(tokenizer)
    if cached is not None:
        return cached
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    mask = np.zeros(max(vocab.values(), default=0) + 1, bool)
    for token, i in vocab.items():
        mask[i] = token.rstrip(".,;:!?").lower() in IDENTITY_TERMS
    _IDS[tokenizer] = mask
    return mask


def blind(ids, mask: np.ndarray, unk_id: int) -> list[int]:
    """``ids`` (one text's vocabulary ids, unmarked) with each identity term's id replaced by ``unk_id``.

    Args:
        ids: token ids of one text.
        mask: :func:`identity_ids` of the tokenizer that gave them.
        unk_id: ``<unk>``'s id.

    Returns:
        The ids, the same length.
    """
    return [unk_id if t < len(mask) and mask[t] else t for t in ids]

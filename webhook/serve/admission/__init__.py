"""The admission webhook adapter: AdmissionReview in, verdict or JSONPatch out (``/validate``, ``/mutate``)."""

from ..answers import Answer
from .decision import decide, declaration_changed, enforcement_for, skipped
from .review import AdmissionRequest, AdmissionResponse, AdmissionReview, BadReview, fit_warnings, parse_review, render

__all__ = [
    "AdmissionRequest",
    "AdmissionResponse",
    "AdmissionReview",
    "Answer",
    "BadReview",
    "decide",
    "declaration_changed",
    "enforcement_for",
    "fit_warnings",
    "parse_review",
    "render",
    "skipped",
]

//! Placeholder: value content generators.

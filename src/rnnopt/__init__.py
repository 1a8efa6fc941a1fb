"""rnnopt: how RNN/LSTM implementations spend time and memory, and which optimisations pay."""

from rnnopt.models.params import init_params
from rnnopt.models.variants import get_variant, list_variants

__all__ = ["get_variant", "init_params", "list_variants"]
__version__ = "0.1.0"

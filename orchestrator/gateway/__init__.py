"""Model gateway: providers, stream guard, context budgets."""

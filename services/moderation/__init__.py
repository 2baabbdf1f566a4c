"""Moderation domain code: the guard model (BingoGuard-style topics + severity), tenant decisions, SafeWatch-style
custom policies, and the streaming check. No gRPC here (api.py translates); long work lives in jobs.py."""

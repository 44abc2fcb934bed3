"""Fleet memory: every run recorded (--history), judged against its own past, and exported as metrics."""

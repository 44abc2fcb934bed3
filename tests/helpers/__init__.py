"""Small helpers the tests share: start real preflight ranks and read what they did."""

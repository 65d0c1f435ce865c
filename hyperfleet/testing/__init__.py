"""What a contributor or plugin author tests against: known test functions for samplers
(``functions``), and the contract suites every scheduler and launcher passes."""

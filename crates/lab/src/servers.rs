//! Placeholder: starting and stopping memcached and cachalot processes.

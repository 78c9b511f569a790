"""Print a new Fernet key for ``AGENT_PERSISTENCE["ENCRYPTION_KEYS"]``: ``python -m agent_persistence.keygen``."""

from cryptography.fernet import Fernet

if __name__ == "__main__":
    print(Fernet.generate_key().decode())

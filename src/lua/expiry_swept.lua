local SERVER_EXPIRY = false

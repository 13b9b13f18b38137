from healer.launch import entry

if __name__ == "__main__":
    entry()

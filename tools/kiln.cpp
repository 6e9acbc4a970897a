// PLACEHOLDER (replaced by the CLI work).
int main() { return 0; }

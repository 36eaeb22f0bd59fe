"""The model floor: the Trace and its columns, the settings, the constants and the errors. Imports
nothing of the engine but the C scanner.
"""

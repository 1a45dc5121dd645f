"""Tests of the executor worker and its handlers against real local servers."""

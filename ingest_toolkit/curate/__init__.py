"""Curated tables: the landed events of each hour, one row per event, with the body parsed into
typed columns whose schema evolves under a contract.

* :mod:`.settings`: how each channel is curated (parser, format, contract, schema file);
* :mod:`.parse`: json, logfmt and regex bodies as Spark VARIANT objects;
* :mod:`.schema`: columns, types, inference, evolution and contracts (the rules);
* :mod:`.columns`: the typed values and the rescued-data column;
* :mod:`.source`: the landed files and events per UTC hour, in each table format;
* :mod:`.tables`, :mod:`.formats`: the curated table in each format, one hour replaced atomically,
  the schema and its changes recorded;
* :mod:`.build`: one curated hour from end to end (:func:`curate_hour`).

docs/curation.md is the user's guide.
"""

from __future__ import annotations

from .build import CuratedResult, curate_hour, dedupe_earliest, landed_schema, open_curated, utc_hours
from .schema import Column, Contract, CuratedSchema, column_name, evolve, load_schema_file
from .settings import ChannelCuration, ContractSettings, CuratedSettings, Curation
from .source import HourFiles, LandedSource, landed_source

__all__ = ["ChannelCuration", "Column", "Contract", "ContractSettings", "CuratedResult", "CuratedSchema",
           "CuratedSettings", "Curation", "HourFiles", "LandedSource", "column_name", "curate_hour",
           "dedupe_earliest", "evolve", "landed_schema", "landed_source", "load_schema_file", "open_curated",
           "utc_hours"]

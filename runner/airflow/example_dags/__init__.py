"""Example DAGs for the runner Airflow provider (copy one into your dags folder to use it)."""
